"""The agent loop with the offline rules: the original silu_and_mul, templated and tuned on PoCL."""

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kerntune.agents.lift import find_lifts, lift_template, values_for
from kerntune.agents.rules import GridCount, RulesProvider, coarse_grid, neighbours, refinement, spread
from kerntune.engine.device import DeviceLimits
from kerntune.engine.events import Analysis, GateChecked, LoopFinished, LoopStarted, Note, PlanMade
from kerntune.engine.events import LeadersRetimed, RoundStarted, RunStarted, TemplateProposed, WinnerVerified
from kerntune.engine.proposal import ParamProposal, TemplateProposal, narrowed, write_template
from kerntune.engine.result import config_key
from kerntune.engine.session import load_session
from kerntune.engine.space import build_space
from kerntune.engine.template import load_template

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
QUICK = ["--headless", "--no-probe", "--repeats", "5", "--seed", "11"]
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1)


def original_spec(tmp_path: Path) -> Path:
    """The no-parameter silu_and_mul spec, with the library's own baseline.cu beside it."""
    d = tmp_path / "silu_original"
    shutil.copytree(HERE / "data" / "originals" / "silu_and_mul", d)
    shutil.copyfile(ROOT / "templates" / "silu_and_mul" / "baseline.cu", d / "baseline.cu")
    return d


def kerntune(*args, env=None, timeout=300):
    env = {**(env if env is not None else os.environ), "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "kerntune.tui.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def without_key() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}


def test_rules_loop_templates_the_original_and_ends_with_a_verified_best_at_least_as_fast(tmp_path):
    spec = original_spec(tmp_path)
    session = tmp_path / "loop.toml"
    r = kerntune("tune", str(spec), "--agent", "rules", "--rounds", "2", "--budget", "8",
                 "--session", str(session), *QUICK)
    assert r.returncode == 0, r.stderr
    assert "agent: rules" in r.stdout and "best:" in r.stdout and "x the original" in r.stdout

    s = load_session(session)
    assert s.warnings == []
    events = s.events
    assert isinstance(events[0], LoopStarted) and events[0].agent == "rules"
    # every step of a round is an event, in order
    kinds = [e.kind for e in events if e.kind in ("round_started", "plan_made", "template_proposed",
                                                  "gate_checked", "search_planned", "run_started", "analysis")]
    assert kinds[:7] == ["run_started",  # the original kernel, measured first
                         "round_started", "plan_made", "template_proposed", "gate_checked", "search_planned",
                         "run_started"]
    assert kinds.count("analysis") == len([e for e in events if isinstance(e, RoundStarted)]) >= 1

    # stage 1: a template of at least two parameters, the gate's checks passed, on the device in use
    proposed = [e for e in events if isinstance(e, TemplateProposed)]
    gate = [e for e in events if isinstance(e, GateChecked)]
    assert gate[-1].ok and "reproduces the original's outputs" in gate[-1].checks[-1]
    assert len(proposed[-1].parameters) >= 2 and proposed[-1].backend == "opencl"
    assert "+#ifndef VEC" in proposed[-1].diff and "reqd_work_group_size(BLOCK, 1, 1)" in proposed[-1].source
    template = load_template(gate[-1].directory)
    assert [p.name for p in template.parameters] == list(proposed[-1].parameters)
    assert "d % VEC == 0" in [c.text for c in template.constraints]
    assert {r.backend for r in events if isinstance(r, RunStarted)} == {"opencl"}

    # stage 2: a verified best, at least as fast as the template's defaults (the original's code)
    # measured in the same session; the original itself is measured and kept as the default configuration
    done = events[-1]
    assert isinstance(done, LoopFinished) and done.best_us > 0
    results = s.results()
    default = template.default_config()
    defaults = [x.median_us for x in results if config_key(x.config) == config_key(default) and x.ranked]
    best = min((x for x in results if x.ranked and x.config), key=lambda x: x.median_us)
    assert s.default_result() is not None and s.default_result().config == {} and done.original_us == s.default_result().median_us
    # never slower than the original: the best configuration, or the original itself when none beat it
    assert done.best_us <= done.original_us and done.speedup >= 1.0
    # the configurations the leaders' paired re-timing chose, and those it found tied (one run's
    # times cannot tell them apart)
    paired = [e for e in events if isinstance(e, LeadersRetimed) and e.valid]
    chosen = [dict(e.configs[e.chosen]) for e in paired]
    tied = {config_key(c) for e in paired for c, t in zip(e.configs, e.tied) if t}
    if done.kept_original:
        assert done.best == {} and done.best_us == done.original_us
        assert done.original_us <= best.median_us or config_key(best.config) in tied
        assert "the original stays" in r.stdout
    else:
        assert any(v.ok and dict(v.config) == dict(done.best) for v in events if isinstance(v, WinnerVerified))
        # the fastest, or the configuration the paired re-timing chose among those tied with it
        assert dict(done.best) in chosen or best.median_us == pytest.approx(done.best_us)
        assert defaults and (done.best_us <= min(defaults) or dict(done.best) in chosen)
    # the planner saw the round before; the tester reported on each round
    plans = [e for e in events if isinstance(e, PlanMade)]
    assert "refine around the best" in plans[1].text if len(plans) > 1 else True
    assert all("verified" in e.text for e in events if isinstance(e, Analysis))
    assert any(isinstance(e, Note) and e.source == "tester" for e in events)

    show = kerntune("show", str(session), "--json")
    assert show.returncode == 0, show.stderr


def test_without_an_agent_or_a_key_a_spec_without_parameters_uses_the_rules_and_says_so(tmp_path):
    spec = original_spec(tmp_path)
    out = tmp_path / "tpl"
    r = kerntune("templatize", str(spec), "-o", str(out), "--session", str(tmp_path / "t.toml"), env=without_key())
    assert r.returncode == 0, r.stderr
    assert "agent: rules (ANTHROPIC_API_KEY is not set" in r.stdout
    template = load_template(out)
    assert len(template.parameters) >= 2 and template.original_sources["opencl"] == (spec / "baseline.cl").read_text()
    diff = (out / "template.diff").read_text()
    assert diff.startswith("--- original.cl\n+++ kernel.cl\n") and "+#ifndef VEC\n" in diff
    assert "-__kernel __attribute__((reqd_work_group_size(256, 1, 1)))" in diff
    notes = [e.text for e in load_session(tmp_path / "t.toml").events if isinstance(e, Note)]
    assert any("ANTHROPIC_API_KEY is not set" in n for n in notes)
    again = kerntune("templatize", str(spec), "-o", str(out), env=without_key())
    assert again.returncode == 2 and "already holds a kernel.toml" in again.stderr


# the rules' pieces ---------------------------------------------------------------------------

def test_lifting_the_opencl_port_gives_block_vec_and_unroll_with_ranges_from_the_device(tmp_path):
    t = load_template(original_spec(tmp_path))
    lifted = lift_template(t, "opencl", CPU)
    p = lifted.proposal
    assert [x.name for x in p.parameters] == ["BLOCK", "VEC", "UNROLL"]
    assert {x.name: x.default for x in p.parameters} == {"BLOCK": 256, "VEC": 8, "UNROLL": 0}
    assert p.parameters[0].values == (32, 64, 128, 256, 512, 1024, 2048, 4096)  # powers of two to the limit
    assert p.parameters[1].values == (1, 2, 4, 8, 16)
    assert p.block == ("BLOCK",) and p.grid == ("tokens",)
    assert p.constraints == ("d % VEC == 0",)
    # the CUDA original has no VEC to lift, so the template is for OpenCL alone, and says so
    assert set(p.sources) == {"opencl"}
    assert any("cuda source has no UNROLL, VEC to lift" in n for n in lifted.notes)


def test_lifting_the_cuda_original_makes_its_block_a_parameter_and_leaves_its_register_loop_unrolled(tmp_path):
    t = load_template(original_spec(tmp_path))
    lifted = lift_template(t, "cuda", DeviceLimits("cuda", "gpu", max_threads_per_block=1024))
    p = lifted.proposal
    # `for (k < 8)` indexes the register packs g.v[k]: unrolled in part, they would spill to local
    # memory, so its `#pragma unroll` stays as written
    assert [x.name for x in p.parameters] == ["BLOCK"]
    assert p.parameters[0].values == (32, 64, 128, 256, 512, 1024)
    src = p.sources["cuda"]
    assert "#pragma unroll\n        for (int k = 0; k < 8; ++k)" in src and "KERNTUNE_PRAGMA" not in src
    # after the includes, and after the #if group that picks the element type (not inside it)
    assert src.index("#ifndef BLOCK") > src.index("#include <cuda_fp16.h>")
    assert src.index("#ifndef BLOCK") > src.index("#endif", src.index("#include <cuda_fp16.h>"))
    assert set(p.sources) == {"cuda", "opencl"}  # the OpenCL port takes it too


def test_a_define_with_a_name_that_is_no_knob_is_left_alone():
    src = ("#define N_HEADS 32\n#define WARP_SIZE 32\n#define TILE 16\n#pragma unroll 4\n"
           "constexpr int kBlockSize = 128;\n")
    lifts = find_lifts(src)
    assert [(lf.name, lf.kind, lf.default) for lf in lifts] == [
        ("TILE", "tile", 16), ("UNROLL", "unroll", 4), ("BLOCK_SIZE", "threads", 128)]


def test_a_launch_attribute_that_disagrees_with_the_spec_keeps_the_block_size_as_it_is(tmp_path):
    d = original_spec(tmp_path)
    (d / "kernel.toml").write_text((d / "kernel.toml").read_text().replace("block = [256]", "block = [128]"))
    lifted = lift_template(load_template(d), "opencl", CPU)
    assert "BLOCK" not in [x.name for x in lifted.proposal.parameters]
    assert any("says 256 threads but the spec launches 128" in n for n in lifted.notes)


def test_value_ranges_and_the_grids_of_the_tuner():
    assert values_for("vector", 4, CPU) == (1, 2, 4, 8, 16)
    assert values_for("tile", 16, CPU) == (4, 8, 16, 32, 64)
    assert spread((32, 64, 128, 256, 512, 1024, 2048, 4096), 256, 3) == (32, 256, 4096)
    assert neighbours((32, 64, 128, 256, 512), 256, threads=True) == (128, 192, 256, 384, 512)
    assert neighbours((1, 2, 4, 8), 8, threads=False) == (4, 8)
    assert neighbours((1, 2, 4, 8, 16), 8, threads=False, radius=2) == (2, 4, 8, 16)


def test_a_refinement_whose_neighbourhood_is_all_measured_reaches_further(tmp_path):
    t = load_template(original_spec(tmp_path))
    template = write_template(t, lift_template(t, "opencl", CPU).proposal, tmp_path / "tpl", CPU)
    best = template.default_config()
    near, _ = refinement(template, best, [], 10_000)
    measured = [SimpleNamespace(config=dict(zip(near, combo)), ranked=True, median_us=1.0 + i)
                for i, combo in enumerate(itertools.product(*near.values()))]
    assert GridCount(template, measured=measured)(near) == 0
    wider, _ = refinement(template, best, measured, 8, radius=2)
    assert 0 < GridCount(template, measured=measured)(wider) <= 8


def test_the_coarse_grid_fits_the_budget_and_keeps_every_default(tmp_path):
    t = load_template(original_spec(tmp_path))
    p = lift_template(t, "opencl", CPU).proposal
    template = write_template(t, p, tmp_path / "tpl", CPU)
    for budget in (1, 6, 12, 24, 48, 500):
        grid = coarse_grid(template, budget)
        size = 1
        for name, values in grid.items():
            assert template.parameter(name).default in values
            size *= len(values)
        assert size <= max(budget, 1)
    full = coarse_grid(template, 10_000)
    assert {k: len(v) for k, v in full.items()} == {"BLOCK": 8, "VEC": 5, "UNROLL": 4}


def test_a_proposal_never_changes_what_the_kernel_is_checked_against(tmp_path):
    t = load_template(original_spec(tmp_path))
    p = TemplateProposal({"opencl": t.source_for("opencl")}, (ParamProposal("VEC", (4, 8), 8),))
    template = write_template(t, p, tmp_path / "tpl", CPU)
    assert [(a.name, a.dtype, a.role) for a in template.arguments] == [(a.name, a.dtype, a.role) for a in t.arguments]
    assert [x.values for x in template.problems] == [x.values for x in t.problems]
    assert template.cost_bytes.source == t.cost_bytes.source
    assert [e.source for e in template.original_block] == ["256"]



# the rounds' plans: which configurations each round proposes ------------------------------------

H200 = DeviceLimits("cuda", "H200", max_threads_per_block=1024, warp_size=32, sm_count=132, max_regs_per_block=65536,
                    peak_bandwidth_gbs=4800.0, peak_gflops=60000.0)


def rules_state(tmp_path: Path, spec: Path, backend: str, limits: DeviceLimits, problem: str | None, budget: int,
                dropped: tuple[str, ...] = ()):
    """The rules' template of an original and a loop state before round 1, as the loop hands it over."""
    t = load_template(spec)
    rules = RulesProvider()
    rules.dropped.update(dropped)
    state = SimpleNamespace(original=t, backend=backend, limits=limits, problem=t.problem(problem), history=(),
                            best=None, budget=budget, template_dir=tmp_path / "tpl", best_profile=None)
    state.template = write_template(t, rules.generate(state, None), tmp_path / "tpl", limits)
    return rules, state


def searched(state, values: dict, results=()) -> list[dict]:
    """What the loop measures of a plan: the template narrowed to the plan's lists (the defaults
    added), its configurations feasible at the problem on the device, less those measured before."""
    seen = {config_key(r.config) for r in results}
    space = build_space(narrowed(state.template, values), state.problem, state.limits)
    return [c.as_dict() for c in space.configs if c.key not in seen]


def measured(configs, time) -> list[SimpleNamespace]:
    return [SimpleNamespace(config=c, ranked=True, median_us=time(c)) for c in configs]


def after(state, results, budget: int):
    """The state after rounds that measured `results`, the fastest the best."""
    best = min(results, key=lambda r: r.median_us)
    record = SimpleNamespace(template_dir=state.template_dir, results=tuple(results))
    return SimpleNamespace(**{**vars(state), "history": (record,), "best": best, "budget": budget})


KERNELS = {  # an online softmax (row-wise stages and FAST_MATH) on an H200's limits; silu_and_mul's OpenCL port
    "softmax_online": (HERE / "data" / "naive" / "softmax_online", "cuda", H200, "llama-t2048", 32),
    "silu_and_mul": (None, "opencl", CPU, None, 12),
}


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_the_first_round_holds_a_switch_at_its_default_and_gives_the_budget_to_the_kernels_shape(kernel, tmp_path):
    spec, backend, limits, problem, budget = KERNELS[kernel]
    spec = spec or original_spec(tmp_path)
    rules, state = rules_state(tmp_path / "with", spec, backend, limits, problem, budget)
    plain_rules, plain = rules_state(tmp_path / "without", spec, backend, limits, problem, budget, ("fast_math",))
    assert "FAST_MATH" in [p.name for p in state.template.parameters]
    assert "FAST_MATH" not in [p.name for p in plain.template.parameters]
    plan, without = rules.tune(state), plain_rules.tune(plain)
    # FAST_MATH at its default; every other list as if the template had no FAST_MATH at all
    assert plan.values["FAST_MATH"] == (0,) and "FAST_MATH at its default, tried on the leaders next" in plan.reason
    assert {k: v for k, v in plan.values.items() if k != "FAST_MATH"} == dict(without.values)
    # the budget counts what the loop will measure: the feasible configurations, the defaults included
    configs = searched(state, plan.values)
    assert GridCount(state.template, state.problem, limits)(plan.values) == len(configs) <= budget
    assert f": {len(configs)} configurations" in plan.reason
    assert sum(len(v) > 1 for v in plan.values.values()) >= 2
    if kernel == "softmax_online":  # a warp or a block a row, the row kept or not, in 16-byte packs or not
        assert plan.values["KEEP"] == (0, 32) and plan.values["VEC"] == (1, 4) and 1024 in plan.values["LANES"]


def test_the_refinement_tries_an_untried_switch_on_the_leader_then_the_neighbours_of_keep_and_vec(tmp_path):
    spec, backend, limits, problem, _ = KERNELS["softmax_online"]
    rules, state = rules_state(tmp_path, spec, backend, limits, problem, 32)
    leader = {"BLOCK": 1024, "LANES": 1024, "KEEP": 32, "VEC": 4, "CHAINS": 1}

    def time(c):  # made up: the further from the leader, the slower; fast math a little faster
        return 100.0 + sum(10.0 + i for i, (k, v) in enumerate(leader.items()) if c[k] != v) - 5.0 * c["FAST_MATH"]

    first = measured(searched(state, rules.tune(state).values), time)
    assert {c.config["FAST_MATH"] for c in first} == {0} and {**leader, "FAST_MATH": 0} in [c.config for c in first]
    # round 2: FAST_MATH on the leader first; then VEC, whose neighbours the budget still holds
    two = after(state, first, 32)
    plan = rules.tune(two)
    configs = searched(two, plan.values, first)
    assert 0 < len(configs) <= 32 and GridCount(state.template, state.problem, limits, first)(plan.values) == len(configs)
    assert {**leader, "FAST_MATH": 1} in configs and {**leader, "VEC": 2, "FAST_MATH": 0} in configs
    assert plan.reason.startswith("neighbours the best's values, switches not yet tried first, then the parameters "
                                  "the kernel's cost (memory-bound) points to (KEEP, LANES, VEC)")
    assert "FAST_MATH (not yet tried)" in plan.reason
    # round 3, FAST_MATH known (on): the neighbours of KEEP on the leader
    second = first + measured(configs, time)
    plan = rules.tune(after(state, second, 32))
    configs = searched(two, plan.values, second)
    assert 0 < len(configs) <= 32 and plan.values["KEEP"] == (16, 32, 64)
    assert {**leader, "KEEP": 16, "FAST_MATH": 1} in configs  # (64 floats a lane do not fit 1024 threads' registers)
    # a budget that holds them all takes FAST_MATH, KEEP and VEC in one round
    plan = rules.tune(after(state, first, 48))
    configs = searched(two, plan.values, first)
    assert len(configs) <= 48 and all(c in configs for c in (
        {**leader, "FAST_MATH": 1}, {**leader, "VEC": 2, "FAST_MATH": 0}, {**leader, "KEEP": 16, "FAST_MATH": 1}))


# lifting guided by the analysis ----------------------------------------------------------------

HELPER_LOOPS = """
__device__ float poly(float x) {
#pragma unroll 4
    for (int k = 0; k < 8; ++k) x = x * 0.5f + 1.0f;
    return x;
}
__global__ void k(float *out, const float *in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float s = 0.0f;
#pragma unroll 2
        for (int j = 0; j < 4; ++j) s += poly(in[i] + j);
        out[i] = s;
    }
}
"""


def test_an_unroll_count_is_lifted_on_the_kernels_own_loop_and_not_in_a_helper_function():
    lifts = find_lifts(HELPER_LOOPS)
    assert [(lf.name, lf.default) for lf in lifts] == [("UNROLL", 2)]
    assert "line 11" in lifts[0].origin


def spec_with(tmp_path: Path, source: str, grid: str, block: str, name: str = "k", reference: str = "") -> Path:
    """A spec of `out = f(in)` over n elements, in OpenCL when the source has `__kernel`."""
    d = tmp_path / "spec"
    d.mkdir(parents=True)
    backend, file = ("opencl", "k.cl") if "__kernel" in source else ("cuda", "k.cu")
    (d / file).write_text(source)
    if reference:
        (d / "reference.py").write_text(reference)
    (d / "kernel.toml").write_text(f"""
[kernel]
name = "{name}"
entry = "{name}"
sources = {{ {backend} = "{file}" }}
{'reference = "reference.py"' if reference else ""}
[launch]
grid = {grid}
block = {block}
[[arg]]
name = "out"
dtype = "float32"
role = "output"
shape = ["n"]
[[arg]]
name = "in"
dtype = "float32"
role = "input"
shape = ["n"]
[[arg]]
name = "n"
dtype = "int32"
role = "scalar"
value = "n"
[[problem]]
name = "small"
n = 4096
[cost]
bytes = "8 * n"
""")
    return d


GPU = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132)


def test_a_block_size_hard_coded_in_the_global_index_is_lifted_with_it(tmp_path):
    src = ("__global__ void k(float *out, const float *in, int n) {\n"
           "    int i = blockIdx.x * 256 + threadIdx.x;\n    if (i < n) out[i] = 2.0f * in[i];\n}\n")
    t = load_template(spec_with(tmp_path, src, '["ceil_div(n, 256)"]', "[256]"))
    p = lift_template(t, "cuda", GPU).proposal
    assert p.block == ("BLOCK",) and p.grid == ("ceil_div(n, BLOCK)",)
    assert "int i = blockIdx.x * BLOCK + threadIdx.x;" in p.sources["cuda"]


def test_a_block_size_the_body_uses_as_a_number_is_left_alone(tmp_path):
    src = ("__global__ void k(float *out, const float *in, int n) {\n"
           "    __shared__ float tile[256];\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    tile[threadIdx.x] = i < n ? in[i] : 0.0f;\n    __syncthreads();\n"
           "    if (i < n) out[i] = tile[255 - threadIdx.x];\n}\n")
    t = load_template(spec_with(tmp_path, src, '["ceil_div(n, 256)"]', "[256]"))
    lifted = lift_template(t, "cuda", GPU)
    assert lifted.proposal is None
    assert any("uses 256 itself (line 2)" in n for n in lifted.notes)


def test_a_two_dimensional_block_is_lifted_in_each_dimension_the_kernel_reads(tmp_path):
    src = ("__global__ void k(float *out, const float *in, int n) {\n"
           "    int x = blockIdx.x * blockDim.x + threadIdx.x;\n    int y = blockIdx.y * blockDim.y + threadIdx.y;\n"
           "    if (x < 64 && y < n / 64) out[y * 64 + x] = in[y * 64 + x];\n}\n")
    t = load_template(spec_with(tmp_path, src, '["ceil_div(64, 16)", "ceil_div(n / 64, 8)"]', "[16, 8]"))
    p = lift_template(t, "cuda", GPU).proposal
    assert p.block == ("BLOCK", "BLOCK_Y") and p.grid == ("ceil_div(64, BLOCK)", "ceil_div(n / 64, BLOCK_Y)")
    assert {x.name: x.default for x in p.parameters} == {"BLOCK": 16, "BLOCK_Y": 8}
    assert "BLOCK * BLOCK_Y <= max_threads_per_block" in p.constraints
    # a dimension the kernel does not read keeps its literal
    src1 = src.replace("blockIdx.y * blockDim.y + threadIdx.y", "0")
    t1 = load_template(spec_with(tmp_path / "one", src1, '["ceil_div(64, 32)", "1"]', "[32, 4]"))
    assert lift_template(t1, "cuda", GPU).proposal.block == ("BLOCK", "4")


def test_a_rejected_template_drops_the_rewrite_it_names_and_keeps_the_lifts():
    from kerntune.agents.rules import RulesProvider

    t = load_template(HERE / "data" / "naive" / "gelu")
    state = SimpleNamespace(original=t, backend="opencl", limits=CPU)
    rules = RulesProvider()
    first = rules.generate(state, None)
    assert [p.name for p in first.parameters] == ["BLOCK", "VEC", "ITEMS", "GRID"]
    again = rules.generate(state, "the default configuration failed: VEC pack misaligned")
    assert [p.name for p in again.parameters] == ["BLOCK"]
    assert rules.rejected == [("elementwise", "the default configuration failed: VEC pack misaligned")]
    assert any("the elementwise rewrite is left out: the gate rejected the template with it" in n for n in again.notes)
    # with no rewrite left, the next rejection drops a lift, as before
    with pytest.raises(Exception, match="nothing left to lift or rewrite"):
        rules.generate(state, "BLOCK is wrong")


def test_a_block_size_a_constant_holds_for_the_kernel_is_lifted_only_with_it(tmp_path):
    src = ("#define NT 256\n__global__ void k(float *out, const float *in, int n) {\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n && threadIdx.x < NT) out[i] = in[i];\n}\n")
    t = load_template(spec_with(tmp_path, src, '["ceil_div(n, 256)"]', "[256]"))
    lifted = lift_template(t, "cuda", GPU)
    # NT names a thread count: lifted, and the block takes it
    assert lifted.proposal.block == ("NT",) and [p.name for p in lifted.proposal.parameters] == ["NT"]
    other = src.replace("NT", "N_PER")
    t2 = load_template(spec_with(tmp_path / "two", other, '["ceil_div(n, 256)"]', "[256]"))
    lifted = lift_template(t2, "cuda", GPU)
    assert lifted.proposal is None and any("takes 256 threads from `N_PER`" in n for n in lifted.notes)


def test_a_block_size_a_tree_reduction_halves_from_stays_a_power_of_two(tmp_path):
    src = ("__global__ void k(float *out, const float *in, int n) {\n"
           "    extern __shared__ float red[];\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    red[threadIdx.x] = i < n ? in[i] : 0.0f;\n    __syncthreads();\n"
           "    for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n"
           "        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];\n        __syncthreads();\n    }\n"
           "    if (threadIdx.x == 0) out[blockIdx.x] = red[0];\n}\n")
    t = load_template(spec_with(tmp_path, src, '["ceil_div(n, 256)"]', "[256]"))
    p = lift_template(t, "cuda", GPU).proposal
    assert p.block == ("BLOCK",) and "is_pow2(BLOCK)" in p.constraints
    # halving a block of 192 would drop a third of the sum: no other step is a tree reduction
    plain = src.replace("s >>= 1", "s -= 32")
    q = lift_template(load_template(spec_with(tmp_path / "plain", plain, '["ceil_div(n, 256)"]', "[256]")), "cuda", GPU)
    assert q.proposal.block == ("BLOCK",) and "is_pow2(BLOCK)" not in q.proposal.constraints


REVERSE = """__kernel void reverse(__global float *out, __global const float *in, int n) {
    int i = get_global_id(0);
    if (i < n) out[i] = in[n - 1 - i];
}
"""


@pytest.mark.parametrize("head, why", [
    ("", "no template to tune (rules provider): the rules find nothing to lift or rewrite: no #define"),
    # a knob the kernel never reads is left as written: nothing to tune
    ("#define VEC 4\n", "no template to tune (rules provider): the rules find nothing to lift or rewrite: left "
                        "`#define VEC 4` (line 1) as written"),
])
def test_with_nothing_to_tune_the_rules_loop_ends_with_the_reverified_original(head, why, tmp_path, capsys,
                                                                               opencl_backend):
    from kerntune.tui.cli import main

    reference = "def reference(inputs, sizes):\n    return {'out': inputs['in'][::-1].copy()}\n"
    spec = spec_with(tmp_path, head + REVERSE, '["ceil_div(n, 16)"]', "[16]", "reverse", reference)
    session = tmp_path / "s.toml"
    rc = main(["tune", str(spec), "--agent", "rules", "--rounds", "2", "--budget", "4",
               "--backend", "opencl", "--session", str(session), *QUICK])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "winner re-verified on new inputs: winner original passed" in out and "the original stays" in out
    done = load_session(session).events[-1]
    assert isinstance(done, LoopFinished) and done.kept_original and done.best == {} and done.best_us > 0
    assert done.reason.startswith(why) and "\n" not in done.reason
    assert f"loop: finished ({why}" in " ".join(out.split())


def test_a_template_measured_to_its_last_configuration_stops_the_loop(tmp_path):
    rules, state = rules_state(tmp_path, original_spec(tmp_path), "opencl", CPU, None, 12)
    every = measured(searched(state, {p.name: p.values for p in state.template.parameters}), lambda c: 1.0)
    some, done_all = after(state, every[1:], 12), after(state, every, 12)
    for done in (some, done_all):
        done.round, done.rounds, done.sol_us, done.sol_target, done.original_result = 2, 3, None, 0.9, None
    assert not rules._plan(some).stop
    plan = rules._plan(done_all)
    assert plan.stop and "every feasible configuration of the template has been measured" in plan.text
