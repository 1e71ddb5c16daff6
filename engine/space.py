"""The feasible configurations of a template for one problem size on one device.

Value lists x constraints x device limits, counting how many configurations each rule pruned.
Limits known only after compiling (registers, spills) are checked in engine/evaluate.py.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from .device import DeviceLimits
from .expressions import ExpressionError, NonFiniteError
from .result import config_key, config_text, value_text
from .template import Constraint, ParamValue, Problem, Template

MAX_SPACE = 2_000_000  # configurations, partial and whole, checked one by one before we refuse
MAX_PRODUCT = 10**9  # configurations in the full product before we refuse


class SpaceError(ValueError):
    """A space that cannot be built (too large, or an expression that cannot be evaluated)."""


@dataclass(frozen=True, order=True)
class Config:
    """One assignment of values to a template's parameters."""

    items: tuple[tuple[str, ParamValue], ...]

    @classmethod
    def of(cls, values: Mapping[str, ParamValue]) -> "Config":
        return cls(tuple(values.items()))

    def as_dict(self) -> dict[str, ParamValue]:
        return dict(self.items)

    def __getitem__(self, name: str) -> ParamValue:
        for k, v in self.items:
            if k == name:
                return v
        raise KeyError(name)

    @property
    def key(self) -> str:
        return config_key(self.as_dict())

    def defines(self) -> dict[str, str]:
        return compiler_defines(self.as_dict())

    def __str__(self) -> str:
        return config_text(self.as_dict())


def compiler_defines(config: Mapping[str, ParamValue]) -> dict[str, str]:
    """The preprocessor definitions that set a configuration in the kernel source (-DNAME=VALUE):
    true and false are 1 and 0."""
    return {k: value_text(v) for k, v in config.items()}


@dataclass(frozen=True)
class Geometry:
    """Launch geometry of one configuration: blocks in the grid, threads per block, shared bytes."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0
    # The template declares dynamic shared memory: OpenCL kernels then take it as a trailing
    # `__local` pointer argument (CUDA kernels as `extern __shared__`).
    dynamic_shared: bool = False

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)

    @property
    def blocks(self) -> int:
        return math.prod(self.grid)


def environment(template: Template, config: Mapping[str, ParamValue], problem: Problem,
                limits: DeviceLimits | None = None) -> dict[str, ParamValue]:
    env: dict[str, ParamValue] = {}
    if limits is not None:
        env.update(limits.expression_names())
    env.update(problem.values)
    env.update(config)
    return env


def geometry(template: Template, config: Mapping[str, ParamValue], problem: Problem,
             limits: DeviceLimits | None = None) -> Geometry:
    """Evaluate the template's launch expressions for one configuration."""
    return geometry_in(template, environment(template, config, problem, limits))


def geometry_in(template: Template, env: Mapping[str, ParamValue]) -> Geometry:
    """The launch expressions evaluated over the names in `env`."""

    def dims(exprs) -> tuple[int, int, int]:
        out = []
        for e in exprs:
            v = e.evaluate(env)
            if isinstance(v, float):
                if not v.is_integer():
                    if "/" in e.source.replace("//", ""):  # one rule for every configuration it prunes
                        raise ExpressionError(f"launch dimension `{e.source}` is not whole: `/` is exact division "
                                              "here; C's integer division is `//`, and `ceil_div(a, b)` covers a tail")
                    raise ExpressionError(f"launch dimension `{e.source}` is not whole: {v}")
                v = int(v)
            out.append(int(v))
        while len(out) < 3:
            out.append(1)
        return (out[0], out[1], out[2])

    shared = int(template.shared_bytes.evaluate(env)) if template.shared_bytes is not None else 0
    return Geometry(dims(template.grid), dims(template.block), shared, template.shared_bytes is not None)


@dataclass(frozen=True)
class Space:
    """Feasible configurations plus how many of the full product each rule removed."""

    template: str
    problem: Problem
    configs: tuple[Config, ...]
    total: int
    pruned: Mapping[str, int] = field(default_factory=dict)

    @property
    def feasible(self) -> int:
        return len(self.configs)

    def index(self, config: Config) -> int:
        return self.configs.index(config)


def device_violation(geo: Geometry, limits: DeviceLimits) -> str | None:
    """The device limit a launch geometry breaks, or None."""
    if any(d < 1 for d in geo.block):
        return "block dimension < 1"
    if any(d < 1 for d in geo.grid):
        return "grid dimension < 1"
    if geo.shared_bytes < 0:  # a negative parameter in launch.shared_bytes
        return "shared memory per block < 0"
    if geo.threads_per_block > limits.max_threads_per_block:
        return f"threads per block > {limits.max_threads_per_block}"
    for i, (d, m) in enumerate(zip(geo.block, limits.max_block_dims)):
        if d > m:
            return f"block dim {'xyz'[i]} > {m}"
    for i, (d, m) in enumerate(zip(geo.grid, limits.max_grid_dims)):
        if d > m:
            return f"grid dim {'xyz'[i]} > {m}"
    shared_limit = max(limits.max_shared_per_block, limits.max_shared_per_block_optin)
    if geo.shared_bytes > shared_limit:
        return f"shared memory per block > {shared_limit}"
    return None


def iter_product(template: Template) -> Iterator[dict[str, ParamValue]]:
    names = [p.name for p in template.parameters]
    for values in itertools.product(*(p.values for p in template.parameters)):
        yield dict(zip(names, values))


def build_space(template: Template, problem: Problem, limits: DeviceLimits) -> Space:
    """Enumerate feasible configurations, naming the rule that pruned each infeasible one.

    The walk goes depth-first over the parameters and decides each constraint as soon as the
    parameters it reads are bound, so a constraint that fails for a partial configuration removes
    every configuration below it at once: the work follows the feasible configurations, not the
    product (MAX_SPACE bounds it; MAX_PRODUCT the product). The result is the flat enumeration's
    exactly: the same configurations in product order, and each infeasible configuration counted
    under the first constraint in list order it fails, then the launch geometry or device limit."""
    total = math.prod(len(p.values) for p in template.parameters)
    if total > MAX_PRODUCT:
        raise SpaceError(f"{template.name}: {total:,} configurations in the full product; at most "
                         f"{MAX_PRODUCT:,} are considered (narrow the value lists)")
    walk = _Walk(template, problem, limits, [p.values for p in template.parameters])
    names = [p.name for p in template.parameters]
    configs = tuple(Config(tuple(zip(names, v))) for v in walk.run())
    return Space(template.name, problem, configs, total, walk.pruned)


def _build_space_flat(template: Template, problem: Problem, limits: DeviceLimits) -> Space:
    """build_space by checking every configuration of the product one at a time: the reference
    the depth-first walk must match (the tests compare the two)."""
    total = math.prod(len(p.values) for p in template.parameters)
    pruned: dict[str, int] = {}
    configs: list[Config] = []
    for values in iter_product(template):
        reason = infeasible_reason(template, values, problem, limits)
        if reason is None:
            configs.append(Config.of(values))
        else:
            pruned[reason] = pruned.get(reason, 0) + 1
    return Space(template.name, problem, tuple(configs), total, pruned)


class _Unbound(Exception):
    """An expression read a parameter the walk has not bound yet: its value is not decided here."""


class _PartialEnv(dict):
    """Sizes, device limits and the parameters bound so far; reading an unbound parameter raises
    _Unbound with its depth (no expression catches it), any other missing name is unknown as usual."""

    def __init__(self, base: Mapping[str, ParamValue], parameters: Sequence[str]):
        self.depth = {name: i for i, name in enumerate(parameters)}
        super().__init__((k, v) for k, v in base.items() if k not in self.depth)

    def __missing__(self, name: str) -> ParamValue:
        if name in self.depth:
            raise _Unbound(self.depth[name])
        raise KeyError(name)


class _Walk:
    """The depth-first walk of build_space over value lists, one per parameter.

    A constraint is evaluated as soon as its value is decided: where the parameters it reads are
    bound, which may be fewer than those it names (`BK > 0 or BM == 64` holds for BK = 32 whatever
    BM is). An evaluation that reads an unbound parameter stops there, and the constraint waits
    for that parameter: until it is bound, the same evaluation would stop at the same place. A
    node carries the first constraint in list order that has failed on its way down and the
    constraints listed before it that are not decided yet; once none is left, the whole subtree
    counts under that constraint in one multiplication. Where every constraint holds, the launch
    geometry is decided the same way, and the subtree is feasible or pruned as a whole."""

    def __init__(self, template: Template, problem: Problem, limits: DeviceLimits,
                 lists: Sequence[Sequence[ParamValue]]):
        self.template, self.problem, self.limits = template, problem, limits
        self.constraints = template.constraints
        declared = [p.name for p in template.parameters]
        self.declared = [tuple(v) for v in lists]
        self.order = self._order(declared, environment(template, {}, problem, limits))
        self.names = [declared[k] for k in self.order]
        self.lists = [self.declared[k] for k in self.order]
        n = len(self.names)
        # configurations below a node at each depth
        self.below = [math.prod(len(v) for v in self.lists[d:]) for d in range(n + 1)]
        self.env = _PartialEnv(environment(template, {}, problem, limits), self.names)
        self.bound: list[ParamValue] = []
        self.at: list[int] = []  # the bound values' places in their lists
        self.found: list[tuple[int, ...]] = []  # feasible configurations, as places in walk order
        self.pruned: dict[str, int] = {}
        self.work = 0
        # below a failed constraint: the counts of subtrees already walked, and the bound
        # parameters that the constraints still pending read
        self.memo: dict[tuple, dict[str, int]] = {}
        self.relevant: dict[tuple[int, int], tuple[int, ...]] = {}
        # a launch that is not finite: the first configuration (in product order) it holds for
        self.error: tuple[tuple[int, ...], SpaceError] | None = None

    def _order(self, declared: list[str], base: Mapping[str, ParamValue]) -> list[int]:
        """The order the walk binds the parameters in: first the modes, parameters that two
        constraints or more read before any other (`MMA` in `MMA != 2 or ...`, whose value
        decides the rest), most first, then the others in the declared order (measured on the
        rules' templates, promoting a parameter that one constraint reads first often costs more
        than it saves). The configurations come out in product order whatever it is."""
        env = _PartialEnv(base, declared)
        first = [0] * len(declared)
        for c in self.constraints:
            try:
                constraint_reason(c, env)
            except _Unbound as e:
                first[e.args[0]] += 1
        modes = [f if f >= 2 else 0 for f in first]  # read first by one constraint: not a mode
        return sorted(range(len(declared)), key=lambda k: (-modes[k], k))

    def run(self) -> list[tuple[ParamValue, ...]]:
        """The feasible configurations (values in the declared order), in product order."""
        if self.below[0]:  # an empty value list leaves nothing to check
            every = (1 << len(self.constraints)) - 1
            self._visit(0, every, None, "", (0,) * (len(self.names) + 1), every, None)
        if self.error is not None:
            raise self.error[1]
        places = sorted(self._declared(at) for at in self.found)
        return [tuple(v[i] for v, i in zip(self.declared, at)) for at in places]

    def _declared(self, at: Sequence[int]) -> tuple[int, ...]:
        """Places in walk order, as places in the declared order."""
        out = [0] * len(at)
        for k, i in zip(self.order, at):
            out[k] = i
        return tuple(out)

    def _spend(self, checks: int) -> None:
        """Count configurations (partial or whole) checked or listed; refuse past MAX_SPACE."""
        self.work += checks
        if self.work > MAX_SPACE:
            if self.error is not None:
                raise self.error[1]
            raise SpaceError(f"{self.template.name}: {self.below[0]:,} configurations in the full product, and "
                             f"more than {MAX_SPACE:,} of them checked one by one before the constraints could "
                             "decide (narrow the value lists, or add constraints that prune them)")

    def _count(self, reason: str, d: int) -> None:
        self.pruned[reason] = self.pruned.get(reason, 0) + self.below[d]

    def _visit(self, d: int, pending: int, failed: int | None, reason: str, waiting: tuple[int, ...],
               ready: int, launch_waits: int | None) -> None:
        """`pending`: a bit for each constraint not decided yet (only those listed before `failed`,
        the first that failed); `waiting[k]`: those that read parameter k unbound; `ready`: those
        to evaluate here; `launch_waits`: the parameter the launch read unbound (None: not tried)."""
        self._spend(1)
        todo = ready & pending
        if todo:
            env, waiting = self.env, list(waiting)
            while todo:
                bit = todo & -todo
                todo ^= bit
                i = bit.bit_length() - 1
                try:
                    why = constraint_reason(self.constraints[i], env)
                except _Unbound as e:
                    waiting[e.args[0]] |= bit
                    continue
                if why is None:
                    pending ^= bit
                else:
                    failed, reason, pending = i, why, pending & (bit - 1)
                    break
            waiting = tuple(waiting)
        if failed is not None:
            if not pending:
                self._count(reason, d)
            else:
                self._failed_below(d, pending, failed, reason, waiting)
            return
        if not pending and (launch_waits is None or launch_waits == d - 1):
            launch_waits = self._launch(d)
            if launch_waits is None:
                return
        self._descend(d, pending, failed, reason, waiting, launch_waits)

    def _descend(self, d: int, pending: int, failed: int | None, reason: str, waiting: tuple[int, ...],
                 launch_waits: int | None) -> None:
        name, env, ready = self.names[d], self.env, waiting[d]
        for i, v in enumerate(self.lists[d]):
            env[name] = v
            self.bound.append(v)
            self.at.append(i)
            self._visit(d + 1, pending, failed, reason, waiting, ready, launch_waits)
            self.bound.pop()
            self.at.pop()
        del env[name]

    def _failed_below(self, d: int, pending: int, failed: int, reason: str, waiting: tuple[int, ...]) -> None:
        """Count the subtree of a node where a constraint failed but some listed before it are
        not decided. What it counts depends only on the bound values those constraints read: a
        subtree counted once counts again for every node that agrees on them."""
        relevant = self.relevant.get((pending, d))
        if relevant is None:
            named = set().union(*(self.constraints[i].expr.names for i in range(failed) if pending >> i & 1))
            relevant = self.relevant[(pending, d)] = tuple(k for k in range(d) if self.names[k] in named)
        # a value's type with it: 1, 1.0 and True are equal keys but not equal to every function
        key = (d, pending, failed, reason, tuple((type(self.bound[k]), self.bound[k]) for k in relevant))
        counts = self.memo.get(key)
        if counts is None:
            outer, self.pruned = self.pruned, {}
            try:
                self._descend(d, pending, failed, reason, waiting, None)
            finally:
                counts, self.pruned = self.pruned, outer
            self.memo[key] = counts
        for why, n in counts.items():
            self.pruned[why] = self.pruned.get(why, 0) + n

    def _launch(self, d: int) -> int | None:
        """Every constraint holds below this node: None where the launch decides its subtree
        (counted pruned or listed feasible), else the parameter it waits for."""
        try:
            why = launch_reason(self.template, self.env, self.limits)
        except _Unbound as e:
            return e.args[0]
        except NonFiniteError as e:  # named for the subtree's first configuration in product order
            at = self._declared(self.at + [0] * (len(self.names) - d))
            if self.error is None or at < self.error[0]:
                first = {p.name: v[i] for p, v, i in zip(self.template.parameters, self.declared, at)}
                self.error = (at, not_finite(self.template, first, self.problem, e))
            return None
        if why is not None:
            self._count(why, d)
            return None
        self._spend(self.below[d])
        prefix = tuple(self.at)
        self.found.extend(prefix + tail for tail in itertools.product(*(range(len(v)) for v in self.lists[d:])))
        return None


def constraint_reason(c: Constraint, env: Mapping[str, ParamValue]) -> str | None:
    """Why a constraint prunes a configuration (its text, or why it cannot be evaluated), or None."""
    try:
        ok = c.expr.evaluate(env)
    except ExpressionError as e:
        return f"{c.text} (cannot evaluate: {e})"
    return None if ok else c.text


def launch_reason(template: Template, env: Mapping[str, ParamValue], limits: DeviceLimits) -> str | None:
    """The launch geometry's or device limit's reason to prune a configuration, or None: the
    launch evaluated over `env` (limits, sizes and parameters). A launch that is not finite
    raises NonFiniteError (see not_finite)."""
    try:
        geo = geometry_in(template, env)
    except NonFiniteError:  # an ExpressionError too, but the spec's fault, not a configuration's
        raise
    except ExpressionError as e:
        return f"launch geometry ({e})"
    return device_violation(geo, limits)


def not_finite(template: Template, config: Mapping[str, ParamValue], problem: Problem,
               error: NonFiniteError) -> SpaceError:
    """A launch that is not finite for a configuration: no configuration is at fault, the spec is."""
    return SpaceError(f"{template.spec_path}: [launch] is not finite for {Config.of(config)} at "
                      f"{problem.label()}: {error}")


def infeasible_reason(template: Template, values: Mapping[str, ParamValue], problem: Problem,
                      limits: DeviceLimits) -> str | None:
    """The first rule a configuration breaks (a constraint's text or a device limit), or None."""
    env = environment(template, values, problem, limits)
    for c in template.constraints:
        why = constraint_reason(c, env)
        if why is not None:
            return why
    try:
        return launch_reason(template, env, limits)
    except NonFiniteError as e:
        raise not_finite(template, values, problem, e) from None


def whole_blocks_only(grid: Any, values: Mapping[str, Any], name: str) -> bool:
    """Whether a grid expression covers the size `name` in whole blocks only: at the size given
    the grid divides it into blocks of some count, and one less leaves elements past the last
    block (`N // 16` at 64 and 63: 4 and 3 blocks of 16), where a ceiling (`(N + 15) // 16`,
    `ceil_div(N, 16)`) still covers them."""
    if name not in grid.names:
        return False
    try:
        at = int(grid.evaluate(values))
        below = int(grid.evaluate({**values, name: int(values[name]) - 1}))
    except (ExpressionError, TypeError, ValueError):
        return False
    v = int(values[name])
    if at <= 0 or v % at:
        return False
    return below * (v // at) < v - 1


def odd_problem(template: Template, problem: Problem, configs: Sequence[Config],
                limits: DeviceLimits) -> Problem | None:
    """A verification size that catches tail bugs, when the spec lists none.

    When no verification problem (nor the tuning problem) has a size that no power of two
    divides, every size of a copy of the first verification size becomes odd (one less) where
    that keeps every feasible configuration feasible: a size the constraints require to be a
    multiple of something stays as it is. None when the spec has an odd size already, or none
    can be made odd."""
    checked = (problem,) + tuple(template.verify_problems)
    if any(int(v) % 2 == 1 and int(v) > 1 for p in checked for v in p.values.values()):
        return None
    first = template.verify_problems[0] if template.verify_problems else problem
    values = dict(first.values)
    changed = []
    # a size the original kernel's own launch covers in whole blocks only (a launcher's `n / 16`,
    # not `(n + 15) / 16`; no bounds check in the kernel) is a multiple by the original's design:
    # an odd one would fail the original, not find a tail bug. Only the original's launch (the
    # spec's, or the one a template made from it keeps as the original's launch) says so, never a grid a
    # template proposes.
    original = template.original_grid or (template.grid if not template.parameters else ())
    for name in values:
        v = int(values[name])
        if v < 2 or any(whole_blocks_only(e, first.values, name) for e in original):
            continue
        trial = Problem("odd", {**values, name: v - 1})
        if all(infeasible_reason(template, c.as_dict(), trial, limits) is None for c in configs):
            values[name] = v - 1
            changed.append(name)
    if not changed:
        return None
    label = ",".join(f"{k}={v}" for k, v in values.items())
    return Problem(f"odd:{label}", values)


def launch_geometry(template: Template, config: Mapping[str, ParamValue] | None, problem: Problem,
                    limits: Any = None) -> Geometry:
    """A configuration's launch; None is the original kernel at its own launch (the default
    configuration's when the template gives none)."""
    if config is not None:
        return geometry(template, config, problem, limits)
    t = template
    if not t.original_block:
        return geometry(t, t.default_config(), problem, limits)
    dims = [[int(e.evaluate(problem.values)) for e in exprs] for exprs in (t.original_grid, t.original_block)]
    pad = [tuple((d + [1, 1, 1])[:3]) for d in dims]
    # the dynamic shared memory the template declares, at the defaults (which reproduce the original)
    shared = 0 if t.shared_bytes is None else \
        int(t.shared_bytes.evaluate(environment(t, t.default_config(), problem, limits)))
    return Geometry(pad[0], pad[1], shared, t.shared_bytes is not None)
