"""The pass interface (agents/passes.py): one edit buffer that refuses overlaps, helpers declared once,
the defaults wrapper, the registry's order, and every registered pass alone at its defaults giving
the original token for token through the C preprocessor."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kerntune.agents import passes
from kerntune.agents.passes import EditConflict, Edits, Helpers, Pass, guarded, helper, ordered, param
from kerntune.agents.rewrites import apply_rewrites
from kerntune.engine.device import DeviceLimits
from kerntune.engine.proposal import original_launch
from kerntune.engine.template import load_template

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rewrite_support import preprocessed  # noqa: E402

NAIVE = Path(__file__).resolve().parent / "data" / "naive"
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1, sm_count=2)
GPU = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132, max_regs_per_block=65536)


def test_the_edit_buffer_works_in_bytes_and_refuses_overlaps():
    e = Edits("/* é */ int a = b + c;")
    start = "/* é */ int a = ".encode().__len__()
    e.replace((start, start + 1), "x")
    e.insert(start, "(")
    e.insert(start + 1, ")")
    with pytest.raises(EditConflict):
        e.replace((start - 2, start + 1), "y")
    with pytest.raises(EditConflict):
        e.replace((start, start + 3), "z")
    assert e.result() == "/* é */ int a = (x) + c;"


def test_a_helper_is_written_once_after_what_it_needs():
    helper("kt_test_base", "// base {N}\n", "cuda")
    helper("kt_test_use", "// uses base\n", "cuda", needs=("kt_test_base",))
    h = Helpers("cuda")
    h.need("kt_test_use")
    h.need("kt_test_base")
    assert h.text({"N": "4"}) == "// base 4\n// uses base\n"
    with pytest.raises(ValueError, match="declared twice"):
        helper("kt_test_base", "// another\n", "cuda")


def test_the_defaults_wrapper_keeps_the_original_at_the_defaults():
    ps = [param("VEC", (1, 2, 4), 1, "vector", "a pack"), param("ON", (0, 1), 0, "flag", "a switch")]
    src = passes.defaults(ps) + guarded(ps, "new code;", "old code;")
    assert preprocessed(src, {}) == ["old", "code", ";"]
    assert preprocessed(src, {"VEC": 2}) == ["new", "code", ";"]
    with pytest.raises(ValueError, match="unknown kind"):
        param("X", (1, 2), 1, "whatever", "")


def test_the_registry_orders_passes_after_what_they_follow_and_last_ones_last():
    class A(Pass):
        name = "a"

    class B(Pass):
        name, follows = "b", ("a",)

    class Z(Pass):
        name, after = "z", ("*",)

    class C(Pass):
        name = "c"

    assert [p.name for p in ordered([Z(), B(), A(), C()])] == ["a", "b", "c", "z"]


def test_what_each_pass_builds_on_comes_from_the_registry_and_claude_asks_by_those_names():
    from kerntune.agents import claude

    on = passes.builds_on()
    assert list(on) == list(passes.names()) and on["rowwise_keep"] == "rowwise" and on["elementwise"] == ""
    assert on["rowwise_chains"] == "rowwise_keep" and on["contraction"] == ""
    schema = next(t for t in claude.TOOLS if t["name"] == "apply_rewrites")["input_schema"]["properties"]["rewrites"]
    assert schema["items"]["enum"] == [claude.LIFT, *passes.names()]
    assert "rowwise_chains needs rowwise_keep" in schema["description"]
    with pytest.raises(claude.ToolInputError, match="rowwise_chains builds on rowwise_keep"):
        claude._parse_rewrites({"rewrites": ["rowwise", "rowwise_chains"]})


def test_a_parameter_claude_proposes_carries_its_kind_and_an_unknown_kind_is_one_error():
    from kerntune.agents import claude

    got = claude._parse_parameters([{"name": "VEC", "values": [1, 4], "default": 1, "kind": "vector"},
                                    {"name": "UNROLL", "values": [1, 2], "default": 1}])
    assert [(p.name, p.kind) for p in got] == [("VEC", "vector"), ("UNROLL", "")]
    with pytest.raises(claude.ToolInputError, match="`kind` must be one of threads"):
        claude._parse_parameters([{"name": "W", "values": [1, 2], "default": 1, "kind": "wide"}])


def test_the_kernel_tree_and_the_passes_read_the_models_one_dialect_table():
    from kerntune.agents import kernel_tree, model, rewrite_fastmath, rewrite_rowwise

    assert kernel_tree.Loop is model.Loop and kernel_tree.Access is model.Access
    assert kernel_tree.ThreadIndex is model.ThreadIndex and kernel_tree.Span is model.Span
    assert kernel_tree.Accumulator is model.Accumulator is rewrite_rowwise.Accumulator
    assert kernel_tree.EXP_FUNCTIONS == rewrite_rowwise.EXP_CALLS == model.DIALECT["cuda"].exp
    assert "__syncwarp" in rewrite_rowwise.COOPERATING and "sub_group_barrier" in kernel_tree.BARRIERS
    assert rewrite_fastmath.OPENCL_FAST["exp"] == "native_exp" and rewrite_fastmath.CUDA_FAST["expf"] == "__expf"
    assert model.DIALECT["opencl"].id("blockDim", 1) == "get_local_size(1)"
    assert model.DIALECT["cuda"].id("gridDim", 2) == "gridDim.z"


def _alone(name: str, backend: str):
    """The first naive kernel the pass named applies to, made with that pass (and those it follows)
    alone: (its original source, the result)."""
    chain = {name}
    for p in reversed(ordered()):
        if p.name in chain:
            chain |= set(p.follows)
    dropped = {p.name for p in passes.PASSES} - chain
    # a kernel named after the pass first (naive/transpose for the transpose): making every
    # kernel's rewrites until one takes the pass costs seconds a pass
    for folder in sorted(NAIVE.iterdir(), key=lambda f: (name not in f.name, f.name)):
        t = load_template(folder)
        if backend not in t.sources:
            continue
        limits = CPU if backend == "opencl" else GPU
        grid, block = original_launch(t, limits)
        applied = apply_rewrites(t, {backend: t.source_for(backend)}, backend, tuple(grid), tuple(block), {},
                                 limits, dropped)
        if name in [r.name for r in applied.rewrites]:
            return t.source_for(backend), applied
    return None, None


@pytest.mark.parametrize("backend", ["opencl", "cuda"])
@pytest.mark.parametrize("name", passes.names())
def test_every_pass_alone_at_its_defaults_is_the_original_token_for_token(name, backend):
    original, applied = _alone(name, backend)
    assert original is not None, f"no naive {backend} kernel takes the {name} pass"
    defaults = {p.name: p.default for r in applied.rewrites for p in r.parameters}
    assert preprocessed(applied.sources[backend], defaults) == preprocessed(original, {})
    assert all(p.kind for r in applied.rewrites for p in r.parameters), "every parameter says its kind"


def test_two_indices_written_alike_but_for_spacing_and_comments_read_the_same():
    from kerntune.agents import syntax
    from kerntune.engine.cxx import parser

    root = parser().parse(b"int a = x[row * C  +  i]; int b = x[row*C+i /* next */];").root_node
    subs = [n for n in syntax.walk(root) if n.type == "subscript_expression"]
    keys = {syntax.compact(s.child_by_field_name("indices") or s, {"i": "@"}) for s in subs}
    assert keys == {"[row*C+@]"}
    assert syntax.uses("float s = xi + v; // i", "xi") and not syntax.uses("float s = xi + v; // i", "i")


# a kernel of each pass (and of each kind of lift: a template's argument, #defines), a backend each
NON_ASCII = [("naive/gelu", "cuda", ["elementwise"]), ("naive/stencil5", "opencl", ["stencil"]),
             ("byo/softmax", "cuda", ["fast_math"]), ("byo/transpose", "cuda", []),
             ("naive/softmax_online", "opencl", ["rowwise", "rowwise_keep", "rowwise_chains", "fast_math"]),
             ("naive/reduce_sequential", "opencl", ["reduction"]), ("naive/matmul_naive", "cuda", ["contraction"])]


@pytest.mark.parametrize("kernel,backend,rewrites", NON_ASCII, ids=[f"{k}-{b}" for k, b, _ in NON_ASCII])
def test_a_comment_of_several_bytes_a_character_before_and_in_the_kernel_changes_nothing_else(kernel, backend,
                                                                                            rewrites, tmp_path):
    """Every span is bytes of the source: `// größe µs` before the kernel and at the top of its body
    (characters of two bytes each) leaves the template what it is with `// grosse us` there."""
    import shutil

    from kerntune.agents.model import build
    from kerntune.agents.rules import rules_template

    def made(comment: str):
        folder = tmp_path / f"{len(comment.encode())}"
        shutil.copytree(NAIVE.parent / kernel, folder)
        t = load_template(folder)
        for path in [p for p in folder.iterdir() if p.suffix in (".cu", ".cl")]:
            src = path.read_text()
            at = build(src, t.entry).kernel.body.start + 1  # just after the body's brace (bytes)
            raw = src.encode()
            path.write_text(comment + "\n" + (raw[:at] + f" {comment}\n".encode() + raw[at:]).decode())
        m = rules_template(load_template(folder), backend, CPU if backend == "opencl" else GPU)
        return [r.name for r in m.applied.rewrites], m.proposal

    plain, wide = "// grosse us", "// größe µs"
    names, a = made(plain)
    wide_names, b = made(wide)
    assert names == wide_names == rewrites and a is not None and b is not None
    assert a.sources[backend].count(plain) >= 2
    assert {k: s.replace(plain, wide) for k, s in a.sources.items()} == b.sources
    assert (a.parameters, a.grid, a.block, a.constraints) == (b.parameters, b.grid, b.block, b.constraints)
