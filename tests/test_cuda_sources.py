"""The built-in CUDA sources compile with nvcc for sm_90, at every value of every parameter."""

import pytest

from kerntune import templates
from kerntune.engine.backends.cuda import compile_cubin
from kerntune.engine.device import DeviceLimits
from kerntune.engine.space import build_space, iter_product
from kerntune.engine.template import load_template

from conftest import needs_nvcc


GPU = DeviceLimits(backend="cuda", name="sm_90", max_threads_per_block=1024, warp_size=32,
                   max_shared_per_block=48 * 1024, max_shared_per_block_optin=227 * 1024,
                   max_regs_per_block=64 * 1024, max_cluster_blocks=8)


def _one_per_value(t):
    """The default config, and for each parameter value the first feasible config that uses it
    (the default with that one value changed, where that is feasible), at the default problem or
    else at another of the template's sizes (softmax's register copy of 2 vectors a thread only
    fits a short row)."""
    default = t.default_config()
    configs = [c.as_dict() for c in build_space(t, t.problem(None), GPU).configs]
    others = [c.as_dict() for p in (*t.problems, *t.verify_problems) for c in build_space(t, p, GPU).configs]
    chosen = [default]
    for p in t.parameters:
        for v in p.values:
            if v != p.default:
                changed = {**default, p.name: v}
                chosen.append(changed if changed in configs else next(c for c in configs + others if c[p.name] == v))
    return chosen


@needs_nvcc
@pytest.mark.parametrize("name", templates.names())
def test_builtin_cuda_templates_compile(name):
    t = load_template(templates.path(name))
    for config in _one_per_value(t):
        _, info, _ = compile_cubin(t.sources["cuda"], t.entry, {k: str(int(v)) for k, v in config.items()},
                                   t.compile_options.get("cuda", ()))
        assert info.get("registers", 0) > 0, config


@needs_nvcc
@pytest.mark.parametrize("name", templates.names())
def test_builtin_baselines_compile(name):
    t = load_template(templates.path(name))
    for backend, source in t.original_sources.items():
        assert backend == "cuda"
        compile_cubin(source, t.entry, {}, t.compile_options.get("cuda", ()))


def test_the_product_covers_every_value():
    t = load_template(templates.path("silu_and_mul"))
    assert sum(1 for _ in iter_product(t)) == 1440


@needs_nvcc
def test_the_bf16_variants_build_for_bfloat16():
    for name in ("silu_and_mul_bf16", "fused_add_rmsnorm_bf16"):
        t = load_template(templates.path(name))
        assert t.compile_options["cuda"] == ("-DKT_BF16",)
        assert {a.dtype for a in t.arguments if a.is_buffer} == {"bfloat16"}
        assert set(t.sources) == {"cuda"} and "cuda" in t.original_sources
        # the same source, element type chosen by the option: a build without it is float16
        assert t.sources["cuda"] == load_template(templates.path(name[:-5])).sources["cuda"]
