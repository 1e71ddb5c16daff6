"""The depth-first walk of a space against the flat enumeration of its product.

build_space decides each constraint as soon as the parameters it reads are bound and counts a
pruned subtree at once; the flat walk (every configuration of the product, one at a time) is the
reference it must match exactly: the same configurations in the same order, the same total and
the same count under each reason.
"""

import math
from dataclasses import replace

import pytest

from kerntune import templates
from kerntune.engine import space as space_module
from kerntune.engine.device import DeviceLimits
from kerntune.engine.expressions import parse
from kerntune.engine.space import SpaceError, _build_space_flat, build_space
from kerntune.engine.template import Constraint, Parameter, Problem, load_template

GPU = DeviceLimits(backend="cuda", name="test gpu", max_threads_per_block=1024, warp_size=32,
                   max_shared_per_block=48 * 1024, max_shared_per_block_optin=64 * 1024, sm_count=4)
SMALL = replace(GPU, max_threads_per_block=128, max_block_dims=(128, 128, 64), warp_size=64)
BASE = load_template(templates.path("vector_add"))


def template(params: dict, constraints: list[str], grid=("ceil_div(n, 32)",), block=("32",), shared=None):
    return replace(BASE, name="walk", parameters=tuple(Parameter(k, tuple(v), v[0]) for k, v in params.items()),
                   constraints=tuple(Constraint(c, parse(c)) for c in constraints),
                   grid=tuple(parse(e) for e in grid), block=tuple(parse(e) for e in block),
                   shared_bytes=None if shared is None else parse(shared))


def same(t, problem, limits):
    walked, flat = build_space(t, problem, limits), _build_space_flat(t, problem, limits)
    assert walked.configs == flat.configs
    assert walked.total == flat.total
    assert walked.pruned == flat.pruned
    return walked


P = {"A": (1, 2, 3, 4), "B": (0, 1, 2, 3), "C": (1, 2, 4, 8), "D": (0, 2, 4), "E": (False, True)}

CASES = {
    # an early constraint that reads the last parameter, and a later one that fails at the second:
    # a configuration failing both counts under the first listed
    "listed before, decided deeper": (["E or A > 2", "A + B <= 4", "B * C <= 12"], ("ceil_div(n, A * 32)",),
                                      ("A * 32",), None),
    # decided early where the rest is never read (short-circuit), deep otherwise
    "short-circuit": (["A > 3 or (B < 2 and D != 2)", "C <= 4 or E", "A != 2 or B != C"], ("n // 32",),
                      ("32 * A", "C"), "D * C * 2048"),
    # sizes and device limits alone, before and after parameters
    "sizes and limits": (["n % 4 == 0", "warp_size == 32 or A == 1", "A * C <= sm_count * 4", "n > 10"],
                         ("ceil_div(n, 32 * C)",), ("32 * C",), None),
    # a constraint that cannot be evaluated for some configurations (division by zero, an
    # unknown name read only for some values) prunes them under its own reason
    "cannot evaluate": (["D // (B - 1) >= 0", "A < 3 or nosuch > 0", "C % (D - 2) == 0 or E"],
                        ("ceil_div(n, C * 32)",), ("C * 32",), None),
    # the launch prunes: a geometry that is not whole, threads and shared memory over the limits
    "launch": (["B != 3"], ("n / (A * 16)",), ("A * C * 16",), "B * 16384 + D"),
    # no constraint at all: the launch decides at the depth it reads
    "launch only": ([], ("ceil_div(n, 64)",), ("B * 64 + 32",), None),
}


@pytest.mark.parametrize("case", CASES)
def test_the_walk_matches_the_flat_enumeration(case):
    constraints, grid, block, shared = CASES[case]
    t = template(P, constraints, grid, block, shared)
    counted = 0
    for n in (4096, 4095, 1000, 8):
        for limits in (GPU, SMALL):
            s = same(t, Problem("p", {"n": n}), limits)
            assert s.feasible + sum(s.pruned.values()) == s.total == math.prod(len(v) for v in P.values())
            counted += len(s.pruned)
    assert counted >= 3  # the cases prune: an identity between two empty results proves nothing


def test_a_parameter_named_as_a_device_limit_shadows_it_before_it_is_bound():
    # `sm_count` is a parameter here: the constraint reads the parameter, never the device's 4
    # (which would decide the first constraint true at the root)
    t = template({"A": (1, 2), "sm_count": (1, 8, 16), "B": (1, 2, 3)},
                 ["sm_count < 16 or B < 3", "A * sm_count <= 16"], block=("32 * A",))
    s = same(t, Problem("p", {"n": 64}), GPU)
    assert s.pruned == {"sm_count < 16 or B < 3": 2, "A * sm_count <= 16": 2}


def test_values_equal_across_types_are_told_apart():
    # True and 1 are equal as keys, not as arguments of is_pow2: a subtree counted for one
    # (below a failed constraint, an earlier one pending) is not the other's
    t = template({"A": (True, 1), "B": (1, 2), "C": (1, 2)}, ["C == 1 or is_pow2(A)", "B == 5"])
    s = same(t, Problem("p", {"n": 64}), GPU)
    assert s.pruned == {"C == 1 or is_pow2(A)": 2, "B == 5": 6}


def test_a_launch_that_is_not_finite_is_one_error_like_the_flat_walk():
    t = template({"A": (1, 2), "B": (1, 2)}, ["A == 2"], grid=("A * 1e308 * 1e308",))  # decided before B is bound
    with pytest.raises(SpaceError) as walked:
        build_space(t, Problem("p", {"n": 64}), GPU)
    with pytest.raises(SpaceError) as flat:
        _build_space_flat(t, Problem("p", {"n": 64}), GPU)
    assert str(walked.value) == str(flat.value)
    assert "not finite for A=2 B=1 at p" in str(walked.value)  # the first that reaches the launch


MODE = {"A": (1, 2, 3), "B": (1, 2, 3, 4), "C": (8, 16), "M": (0, 1, 2)}
MODE_RULES = ["M != 2 or A > 1", "M == 0 or B < 4", "A * B <= 8", "M != 1 or C == 16"]


def test_a_mode_declared_last_is_walked_first_and_the_configurations_stay_in_product_order():
    t = template(MODE, MODE_RULES, block=("C * A",))
    assert space_module._Walk(t, Problem("p", {"n": 64}), GPU, list(MODE.values())).order[0] == 3  # M
    s = same(t, Problem("p", {"n": 64}), GPU)
    assert list(s.configs) != sorted(s.configs, key=lambda c: c["M"])  # not in the order walked
    assert len(s.pruned) == 4


def test_a_launch_not_finite_names_the_first_configuration_in_product_order_whatever_the_walk():
    # M is walked first: the walk meets M = 0, A = 3 before M = 1, A = 2, the first in product order
    t = template(MODE, MODE_RULES[:3], grid=("(1e308 * 1e308) if (M == 0 and A == 3) or (M == 1 and A == 2) else 1",))
    with pytest.raises(SpaceError) as walked:
        build_space(t, Problem("p", {"n": 64}), GPU)
    with pytest.raises(SpaceError) as flat:
        _build_space_flat(t, Problem("p", {"n": 64}), GPU)
    assert str(walked.value) == str(flat.value)
    assert "not finite for A=2 B=1 C=8 M=1 at p" in str(walked.value)


def test_real_templates_match():
    for name in ("silu_and_mul", "softmax"):
        t = load_template(templates.path(name))
        for p in (*t.problems[:1], t.problem(None, {k: v - 1 for k, v in t.problems[0].values.items()})):
            same(t, p, GPU)
            same(t, p, SMALL)


def test_a_product_too_large_to_walk_flat_is_decided_by_its_constraints():
    # 11 parameters of 6 values (362,797,056 configurations): non-decreasing sequences are feasible
    names = [f"X{k}" for k in range(11)]
    t = template({n: range(1, 7) for n in names}, [f"{a} <= {b}" for a, b in zip(names, names[1:])])
    s = build_space(t, Problem("p", {"n": 64}), GPU)
    assert s.total == 6 ** 11
    assert s.feasible == math.comb(16, 5)  # sequences of 11 from 6 values, non-decreasing
    assert s.feasible + sum(s.pruned.values()) == s.total
    # the first descent names the reason: X0 > X1 counts 15 pairs (of 36) times the rest
    assert s.pruned["X0 <= X1"] == 15 * 6 ** 9
    assert all(list(c.as_dict().values()) == sorted(c.as_dict().values()) for c in s.configs)
    # the same shape, small enough for the flat walk, attributes every configuration alike
    same(template({n: range(1, 5) for n in names[:5]}, [f"{a} <= {b}" for a, b in zip(names[:4], names[1:5])]),
         Problem("p", {"n": 64}), GPU)


def test_limits_refuse_a_product_or_a_walk_too_large_in_one_line(monkeypatch):
    names = [f"X{k}" for k in range(12)]
    huge = template({n: range(1, 7) for n in names}, [])
    with pytest.raises(SpaceError, match=r"2,176,782,336 configurations in the full product; at most "
                                         r"1,000,000,000 are considered \(narrow the value lists\)"):
        build_space(huge, Problem("p", {"n": 64}), GPU)
    monkeypatch.setattr(space_module, "MAX_SPACE", 1000)
    loose = template({n: range(1, 7) for n in names[:6]}, ["X5 < 6"])  # decided only at the last parameter
    with pytest.raises(SpaceError, match=r"46,656 configurations in the full product, and more than 1,000 of "
                                         r"them checked one by one") as e:
        build_space(loose, Problem("p", {"n": 64}), GPU)
    assert "\n" not in str(e.value)
    # pruned early, the same product is well within the limit
    tight = template({n: range(1, 7) for n in names[:6]}, ["X0 == 1", "X1 == 1", "X2 <= 2"])
    assert build_space(tight, Problem("p", {"n": 64}), GPU).feasible == 2 * 6 ** 3
