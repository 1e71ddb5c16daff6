"""The rules read the named kernel and what it calls only: a file holding several variants of an
operation (as code bases publish them) gives its first kernel the template the kernel gets alone."""

from pathlib import Path

import pytest

from kerntune.agents.kernel_tree import kernel_view
from kerntune.agents.rules import rules_template
from kerntune.engine.device import DeviceLimits
from kerntune.engine.template import parse_template

DATA = Path(__file__).resolve().parent / "data" / "variants"
CUT = "// ---- the other variants ----\n"
LIMITS = {"cuda": DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132),
          "opencl": DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1)}


def template_of(spec: str, backend: str, source: str):
    path = DATA / spec
    return parse_template(path.read_text(), path, sources={backend: source})


@pytest.mark.parametrize("spec, backend, fname", [("layernorm.toml", "cuda", "layernorm.cu"),
                                                  ("softmax.toml", "opencl", "softmax.cl")])
def test_the_first_kernel_of_a_file_of_variants_gets_the_template_it_gets_alone(spec, backend, fname):
    whole = (DATA / fname).read_text()
    alone, rest = whole[:whole.index(CUT)], whole[whole.index(CUT):]
    made = rules_template(template_of(spec, backend, whole), backend, LIMITS[backend]).proposal
    single = rules_template(template_of(spec, backend, alone), backend, LIMITS[backend]).proposal
    assert made is not None and single is not None
    assert made.parameters == single.parameters and made.constraints == single.constraints
    assert (made.grid, made.block, made.shared_bytes) == (single.grid, single.block, single.shared_bytes)
    assert made.notes == single.notes
    # the other kernels are kept as written, after the kernel's template
    assert made.sources[backend] == single.sources[backend] + rest
    # the row-wise rewrite is made: no other kernel's thread ids or loops refuse it or add a count
    names = [p.name for p in made.parameters]
    assert "LANES" in names and not any("UNROLL" in n for n in names), names


def test_the_view_hides_what_the_kernel_does_not_call_and_keeps_lines():
    src = (DATA / "layernorm.cu").read_text()
    view = kernel_view(src, "layernorm_warps")
    assert "warp_reduce_sum(float v)" in view.text and "__global__ void layernorm_warps" in view.text
    assert "layernorm_rows" not in view.text and "mean_kernel" not in view.text
    assert view.text.count("\n") == src.count("\n")
    assert view.restore(view.text) == src
    first = kernel_view(src, "layernorm_rows").text
    assert "warp_reduce_sum" not in first and "#define WARP 32" in first
    # a function reached through a macro, and a namespace-qualified template entry
    src = ("#define CALL(a) helper(a)\n__device__ float helper(float x) { return x; }\n"
           "__device__ float unused(float x) { return x; }\nnamespace ns {\ntemplate <typename T>\n"
           "__global__ void k(T* a) { a[threadIdx.x] = CALL(a[threadIdx.x]); }\n}\n")
    view = kernel_view(src, "ns::k<float>")
    assert "helper(float x)" in view.text and "unused" not in view.text and "void k(T* a)" in view.text
    assert view.restore(view.text) == src
