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


def _alone(name: str, backend: str):
    """The first naive kernel the pass named applies to, made with that pass (and those it follows)
    alone: (its original source, the result)."""
    chain = {name}
    for p in reversed(ordered()):
        if p.name in chain:
            chain |= set(p.follows)
    dropped = {p.name for p in passes.PASSES} - chain
    for folder in sorted(NAIVE.iterdir()):
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
