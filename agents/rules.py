"""The `rules` provider: the four roles offline and deterministic.

- planner: round 1 templates the kernel and searches a grid of the template's space; later rounds
  refine around the best so far; it stops when there is nothing verified to refine around;
- generator: lifts the original's literals into parameters (agents/lift.py) and makes the rewrites
  its analysis proves safe on top (agents/rewrites.py); after a rejection it leaves out the
  rewrite or lift the gate named, else the last rewrite, else the riskiest lift, and notes why;
- tuner: the whole grid when it fits the budget, else a coarse grid (every other value, the
  default and the ends kept; the values the rewrites name first, when there are rewrites, those
  of a rewrite for memory-bound kernels only where the kernel's cost says it is one; a switch
  such as FAST_MATH held at its default before any other list loses a value); then the
  neighbours of the best's values: switches not yet tried first, then the parameters the
  profile (else the kernel's cost) points to, then those that moved the time most, and
  midpoints between thread counts. A grid is sized by the configurations the loop would measure
  of it: those feasible at the problem on the device and not measured before, the defaults
  included;
- tester: best against the original and the template's default, % of SOL, failures by status.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping

from kerntune.engine.agent_api import LoopState, Plan, ProviderError, Report, RoundRecord, SearchPlan
from kerntune.engine.device import DeviceLimits
from kerntune.engine.proposal import TemplateProposal
from kerntune.engine.result import config_label
from kerntune.engine.space import infeasible_reason
from kerntune.engine.template import Parameter, ParamValue, Problem, Template

from . import rewrite_fastmath, rewrite_rowwise
from .analysis import round_analysis, sol_line, sol_table, us
from .kernel_tree import KernelTreeError, classify, kernel_view
from .lift import KINDS, Lift, Lifted, file_shared_budget, lift_template
from .rewrites import GATE_LEFT_OUT, Applied, Rewrite, compose

# What to vary first, by the bound Nsight Compute reports for the best configuration (kinds of
# parameter as agents/lift.py names them, and "keep"): a memory-bound kernel wants fewer passes
# over memory (data kept on chip between them) and more bytes in flight per thread, a
# latency-bound one more warps or more independent work per warp, a compute-bound one cheaper
# arithmetic.
BOUND_FIRST = {
    "memory": ("keep", "vector", "unroll", "tile"),
    "latency": ("threads", "unroll", "tile"),
    "compute": ("flag", "unroll", "tile"),
}
KEEP_NAME = re.compile(r"(^|_)KEEP(_|$)")  # data kept on chip between passes (agents/rewrite_rowkeep.py)
GRID_BUDGET = 48  # configurations of the first round when the loop sets no budget
REFINE_BUDGET = 24
# A grid with more configurations than this is not checked one by one for feasibility: it is
# taken to hold all of them (a budget is far smaller)
FEASIBLE_CHECK_LIMIT = 20_000


class RulesProvider:
    """Planner, generator, tuner and tester from fixed rules; no network, same input same output."""

    name = "rules"
    model = ""

    def __init__(self) -> None:
        self.dropped: set[str] = set()  # lifts by parameter name, rewrites by their name
        self.lifts: list[Lift] = []
        self.rewrites: list[Rewrite] = []
        self.rejected: list[tuple[str, str]] = []  # (rewrite, why the gate rejected the template with it)

    # planner -----------------------------------------------------------------------------------
    def plan(self, state: LoopState) -> Plan:
        plan = self._plan(state)
        for line in plan.text.splitlines():
            state.say(line, "planner")
        return plan

    def _plan(self, state: LoopState) -> Plan:
        sol = sol_line(state)
        table = sol_table(state)
        if state.template is None:
            text = (f"Round {state.round}: make the original a template by lifting its literals (#defines, "
                    "constexpr values, #pragma unroll counts on the kernel's own loops, the launch's block size in "
                    "each dimension it reads) into parameters with ranges from the device's limits, and by the "
                    "rewrites its analysis proves safe; the gate checks that the defaults reproduce the original. "
                    f"Then search a grid of the template's space.\n{analysis_line(state)}\n{sol}"
                    + (f"\n{table}" if table else ""))
            return Plan(text, retemplate=True)
        mine = [r for r in state.history if r.template_dir == state.template_dir]
        if state.best is None:
            return Plan(f"Round {state.round}: no verified result to refine around; stopping.\n{sol}", stop=True)
        around = config_label(state.best.config)
        tried = sum(len(r.results) for r in mine)
        whole = {p.name: p.values for p in state.template.parameters}
        if not GridCount(state.template, state.problem, state.limits, [x for r in mine for x in r.results])(whole):
            return Plan(f"Round {state.round}: every feasible configuration of the template has been measured "
                        f"({tried} of this template so far); nothing is left to refine; stopping.\n{sol}", stop=True)
        evidence, _ = profile_evidence(state)
        order = refine_order_words(state)
        return Plan(f"Round {state.round}: refine around the best so far ({around}, {us(state.best.median_us)}): "
                    f"the neighbouring values of each parameter, {order} "
                    f"({tried} configurations of this template measured so far are not repeated).\n{sol}"
                    + (f"\n{evidence}" if evidence else ""))

    # generator ---------------------------------------------------------------------------------
    def generate(self, state: LoopState, rejection: str | None) -> TemplateProposal:
        if rejection is not None:
            self._reduce(rejection)
        made = rules_template(state.original, state.backend, state.limits, self.dropped)
        proposal = made.proposal
        if proposal is None:
            raise ProviderError(f"the rules find nothing {'left ' if self.dropped else ''}to lift or rewrite: "
                                + made.why_none())
        self.lifts = made.lifted.lifts
        self.rewrites = made.applied.rewrites
        if self.rejected:
            proposal = replace(proposal, notes=tuple(proposal.notes) + tuple(
                f"the {name} rewrite is left out: the gate rejected the template with it ({why})"
                for name, why in self.rejected))
        return proposal

    def _reduce(self, rejection: str) -> None:
        """After a rejection: leave out what the gate named, else the riskiest rewrite, else the
        riskiest lift (rewrites go first: the lifts alone reproduced the original more often)."""
        for r in self.rewrites:
            if any(re.search(rf"\b{re.escape(p.name)}\b", rejection) for p in r.parameters):
                self._drop_rewrite(r.name, rejection)
                return
        named = [lf.name for lf in self.lifts if re.search(rf"\b{re.escape(lf.name)}\b", rejection)]
        if named:
            self.dropped.update(named)
            return
        if self.rewrites:
            self._drop_rewrite(self.rewrites[-1].name, rejection)
            return
        if self.lifts:
            riskiest = max(self.lifts, key=lambda lf: (lf.risk, -self.lifts.index(lf)))
            self.dropped.add(riskiest.name)

    def _drop_rewrite(self, name: str, rejection: str) -> None:
        self.dropped.add(name)
        self.rejected.append((name, rejection.splitlines()[0][:300] if rejection else ""))

    # tuner -------------------------------------------------------------------------------------
    def tune(self, state: LoopState) -> SearchPlan:
        template = state.template
        assert template is not None
        mine = [r for rec in state.history if rec.template_dir == state.template_dir for r in rec.results]
        if not mine or state.best is None:
            budget = state.budget or GRID_BUDGET
            first = self._first(template, cost_bound(state))
            count = GridCount(template, state.problem, state.limits)
            values = coarse_grid(template, budget, first, count)
            held = [p.name for p in template.parameters if is_switch(p) and len(values[p.name]) < len(p.values)]
            how = "the whole grid" if all(len(values[p.name]) == len(p.values) for p in template.parameters) \
                else "a coarse grid (every other value of the longest lists, the default kept)"
            if first:
                how = (f"a grid of the values the rewrites name first ({', '.join(sorted(first))}) and a coarse "
                       "grid of the rest, the defaults kept")
            if held:
                how += f"; {', '.join(held)} at {'its' if len(held) == 1 else 'their'} default, tried on the leaders next"
            return SearchPlan("grid", budget, values, f"{how}: {count(values)} configurations")
        budget = state.budget or REFINE_BUDGET
        first, _ = refine_first(state)
        count = GridCount(template, state.problem, state.limits, mine)
        # A neighbourhood measured to the last configuration is widened (values two, then three
        # places away...) until it holds something new: a round never re-proposes only what is known.
        widest = max((len(p.values) for p in template.parameters), default=1)
        for radius in range(1, widest + 1):
            values, order = refinement(template, state.best.config, mine, budget, first, radius, count)
            if count(values):
                break
        near = "neighbours" if radius == 1 else f"values up to {radius} places from"
        return SearchPlan("grid", budget, values,
                          f"{near} the best's values, {refine_order_words(state)}: " + ", ".join(order)
                          + f" ({count(values)} configurations not measured before)")

    def _first(self, template: Template, bound: str = "") -> dict[str, tuple]:
        """The values the applied rewrites name as worth measuring first, for this template; a
        rewrite that helps kernels of one bound (keeping a row on chip helps a memory-bound one)
        names them only where the kernel's cost says it is of that bound, or does not say."""
        names = {p.name: p for p in template.parameters}
        out: dict[str, tuple] = {}
        for r in self.rewrites:
            if r.helps and bound and r.helps != bound:
                continue
            for name, values in r.first.items():
                p = names.get(name)
                if p is not None:
                    out[name] = tuple(sorted({v for v in values if v in p.values} | {p.default}))
        return out

    # tester ------------------------------------------------------------------------------------
    def test(self, state: LoopState, record: RoundRecord) -> Report:
        text = round_analysis(state, record)
        for line in text.splitlines():
            state.say(line, "tester")
        return Report(text, stop=record.best is None and state.best is None)


@dataclass
class RulesTemplate:
    """The rules' template of a kernel: the proposal (None: nothing to lift or rewrite), what was
    lifted and which rewrites were made or declined."""

    proposal: TemplateProposal | None
    lifted: Lifted
    applied: Applied

    def why_none(self) -> str:
        """Why each lift and rewrite was left out, in one line."""
        why = [n.removeprefix("nothing to lift: ") for n in self.lifted.notes if not n.startswith("lifted ")]
        why += [f"no {d.name} rewrite: {d.reason}" for d in self.applied.declined]
        return "; ".join(why)


def rules_template(original: Template, backend: str, limits: DeviceLimits,
                   dropped: frozenset[str] | set[str] = frozenset(), lift: bool = True,
                   left_out: str = GATE_LEFT_OUT) -> RulesTemplate:
    """The literals lifted (unless `lift` is false) and the rewrites the analysis proves safe made on
    top: the one way from a kernel to the rules' template, for the rules' generator and for Claude's
    apply_rewrites tool. Lifts and rewrites named in `dropped` are left out, `left_out` saying why.

    The rules read the named kernel and what it calls only (agents/kernel_tree.py's kernel_view):
    the file's other kernels never decide a rewrite or a parameter, and are kept as written."""
    views = {b: kernel_view(src, original.entry) for b, src in original.sources.items()}
    original = replace(original, sources={b: v.text for b, v in views.items()})
    lifted = lift_template(original, backend, limits, set(dropped)) if lift else \
        Lifted(None, [], ["literals not lifted: not asked for"])
    proposal, applied = compose(original, backend, limits, lifted.proposal, dropped, left_out)
    if proposal is not None and lifted.proposal is None:  # rewrites alone: say why nothing was lifted
        proposal = replace(proposal, notes=tuple(lifted.notes) + tuple(proposal.notes))
    if proposal is not None:
        proposal = replace(proposal, sources={b: views[b].restore(src) if b in views else src
                                              for b, src in proposal.sources.items()})
        proposal = _whole_file_budget(proposal, views)
    if lifted.proposal is not None:
        lifted = replace(lifted, proposal=replace(lifted.proposal, sources={
            b: views[b].restore(src) if b in views else src for b, src in lifted.proposal.sources.items()}))
    return RulesTemplate(proposal, lifted, applied)


def _whole_file_budget(proposal: TemplateProposal, views: dict) -> TemplateProposal:
    """The shared-memory budget of the file's other kernels, hidden from the rules but compiled
    with the kernel: a parameter that sizes one of their arrays past the device's limit fails the
    build of every configuration with that value."""
    if not any(v.hidden for v in views.values()):
        return proposal
    names = [p.name for p in proposal.parameters]
    more = [c for b, src in proposal.sources.items() if b in views and views[b].hidden
            and (c := file_shared_budget(src, names, [text for _, text in views[b].hidden])) is not None
            and c not in proposal.constraints]
    return replace(proposal, constraints=tuple(proposal.constraints) + tuple(dict.fromkeys(more))) if more else proposal


class GridCount:
    """How many configurations the loop would measure of a grid of value lists: those of their
    product, each list with the template's default added (as the loop adds it), that are feasible
    at the problem on the device (every one, when either is not given) and not among `measured`."""

    def __init__(self, template: Template, problem: Problem | None = None, limits: DeviceLimits | None = None,
                 measured: Iterable = ()):
        self.template, self.problem, self.limits = template, problem, limits
        self.names = [p.name for p in template.parameters]
        self.defaults = template.default_config()
        self.seen = {tuple(r.config.get(n) for n in self.names) for r in measured if r.config}
        self._feasible: dict[tuple, bool] = {}

    def __call__(self, values: Mapping[str, Iterable[ParamValue]]) -> int:
        lists = [tuple(dict.fromkeys((*values.get(n, ()), self.defaults[n]))) for n in self.names]
        if self.problem is None or self.limits is None or math.prod(map(len, lists)) > FEASIBLE_CHECK_LIMIT:
            return math.prod(map(len, lists)) - sum(
                1 for c in self.seen if all(v in x for v, x in zip(c, lists)))
        return sum(1 for combo in itertools.product(*lists) if combo not in self.seen and self.feasible(combo))

    def feasible(self, combo: tuple) -> bool:
        if combo not in self._feasible:
            self._feasible[combo] = infeasible_reason(self.template, dict(zip(self.names, combo)), self.problem,
                                                      self.limits) is None
        return self._feasible[combo]


def product_count(values: Mapping[str, tuple]) -> int:
    """The configurations of a grid of value lists, feasible or not."""
    return math.prod(len(v) for v in values.values())


def is_switch(p: Parameter) -> bool:
    """Whether the parameter turns something on or off (FAST_MATH, a lifted USE_ flag)."""
    return len(p.values) == 2 and param_kind(p.name, p.kind) == "flag"


def coarse_grid(template: Template, budget: int, first: dict | None = None,
                count: Callable[[Mapping[str, tuple]], int] = product_count) -> dict[str, tuple[ParamValue, ...]]:
    """Value lists that `count` (the product, or a GridCount) says fit the budget: a switch (on or
    off) loses its second value first, then the longest list, again and again (a thread count
    last among equals), and each list keeps values spread over its range, the default among
    them. A parameter in `first` starts from those values (the rewrites' choice), the others from
    two (the default and the far end) when `first` is given.

    Switches go first because a switch's effect (fast math calls, say) is much the same whatever
    the kernel's shape: crossed with the shape it would halve the shapes the first round can
    measure; it is tried on the leaders in the refinement instead."""
    first = first or {}
    lists = {p.name: tuple(first[p.name]) if p.name in first else
             ((_next_to(p) if is_thread_count(p) else spread(p.values, p.default, 2)) if first else tuple(p.values))
             for p in template.parameters}
    counts = {name: len(v) for name, v in lists.items()}
    threads = {p.name for p in template.parameters if is_thread_count(p)}
    switches = {p.name for p in template.parameters if is_switch(p)}

    def grid() -> dict[str, tuple[ParamValue, ...]]:
        return {p.name: spread(lists[p.name], p.default, counts[p.name]) for p in template.parameters}

    while max(counts.values(), default=1) > 1 and count(grid()) > budget:
        name = max((n for n in counts if counts[n] > 1), key=lambda n: (n in switches, counts[n], n not in threads))
        counts[name] -= 1
    return grid()


def _next_to(p: Parameter) -> tuple:
    """A thread count's default and its largest value (the one below the default when that is
    the largest): beside the rewrites' chosen values, a block of one thread, the far end of the
    list the other way, measures nothing worth knowing."""
    ordered = sorted(p.values)
    i = ordered.index(p.default)
    other = ordered[-1] if i + 1 < len(ordered) else ordered[i - 1] if i else None
    return tuple(sorted({p.default} | ({other} if other is not None else set())))


def spread(values: tuple, default: ParamValue, k: int) -> tuple:
    """k of the values, evenly spread over the sorted list, the default among them."""
    ordered = sorted(values)
    if k >= len(ordered):
        return tuple(ordered)
    if k <= 1:
        return (default,)
    picks = sorted({round(i * (len(ordered) - 1) / (k - 1)) for i in range(k)})
    d = ordered.index(default)
    if d not in picks:
        nearest = min(picks, key=lambda i: (abs(i - d), i))
        picks = sorted(set(picks) - {nearest} | {d})
    return tuple(ordered[i] for i in picks)


# What the tuner makes of each kind a parameter says it is (engine/template.py's PARAM_KINDS): the
# kinds BOUND_FIRST orders by; threads and lanes are both thread counts
TUNER_KIND = {"threads": "threads", "lanes": "vector", "rows": "tile", "vector": "vector", "work": "tile",
              "grid": "", "bounds": "", "flag": "flag", "unroll": "unroll", "tile": "tile", "keep": "keep",
              "chains": "", "size": "tile"}
THREAD_KINDS = ("threads", "lanes")


def param_kind(name: str, kind: str = "") -> str:
    """threads, vector, unroll, flag, tile, keep (data kept on chip between passes) or '': from the
    kind the parameter says it is, else from its name (agents/lift.py's names), never its description."""
    if kind:
        return TUNER_KIND.get(kind, "")
    upper = name.upper()
    if KEEP_NAME.search(upper):
        return "keep"
    for k, pattern in KINDS:
        if pattern.search(upper):
            return k
    return ""


def is_thread_count(p: Parameter) -> bool:
    """Whether the parameter counts threads (a block's, or a row's or segment's lanes)."""
    return p.kind in THREAD_KINDS if p.kind else param_kind(p.name) == "threads"


def analysis_line(state: LoopState) -> str:
    """What the syntax tree says of the original kernel, and so which rewrites can apply."""
    try:
        a = classify(kernel_source(state), state.original.entry)
    except (KernelTreeError, ValueError) as e:
        return f"Analysis: the kernel could not be read ({e}); literals only."
    what = {"elementwise": "an elementwise map: vector packs, items per thread, the grid's shape and cache "
                           "hints can be rewritten",
            "rowwise": "a row-wise map-reduce: the row can be spread over a group of threads, a lane's share of it "
                       "kept in registers between passes and moved in vector packs",
            "neither": "neither elementwise nor row-wise: literals only"}[a.kind]
    reason = f" ({a.reasons[0]})" if a.reasons else ""
    if a.kind == "rowwise" and chained(state):
        reason += ("; a pass carries its accumulators through an exponential from one element to the next (an "
                   "online softmax), a chain whose latency bounds it once the row is on chip: a lane can run 1, 2 or "
                   "4 independent chains of it (CHAINS), combined at the pass's end")
    fast = rewrite_fastmath.fast_calls(kernel_source(state), state.original.entry, state.backend)
    if fast.sites and not rewrite_fastmath.built_fast(state.original, state.backend):
        reason += f"; FAST_MATH can switch its math calls to the hardware's fast approximations ({fast.switched()})"
    bound = cost_bound(state)
    by_cost = (f" By its cost it is {bound}-bound at this device's peaks" +
               (": fewer passes over memory and wider accesses first." if bound == "memory" else ".")) if bound else ""
    return f"Analysis: {a.name} is {what}{reason}.{by_cost}"


def kernel_source(state: LoopState) -> str:
    """The original's source for the backend in use as the rules read it: the named kernel and what
    it calls, the file's other functions hidden."""
    return kernel_view(state.original.source_for(state.backend), state.original.entry).text


def chained(state: LoopState) -> bool:
    """Whether the row-wise rewrite can split a pass carried through an exponential into chains."""
    try:
        return rewrite_rowwise.analyse(kernel_source(state), state.original.entry).chained
    except ValueError:
        return False


def cost_bound(state: LoopState) -> str:
    """'memory' or 'compute': which of the spec's bytes and flops at the tuned size takes longer at the
    device's peak rates; '' when the peaks are not known."""
    lim, o = state.limits, state.original
    if lim.peak_bandwidth_gbs <= 0 or lim.peak_gflops <= 0:
        return ""
    values = state.problem.values
    moved, flops = float(o.cost_bytes.evaluate(values)), float(o.cost_flops.evaluate(values))
    return "memory" if moved / lim.peak_bandwidth_gbs >= flops / lim.peak_gflops else "compute"


def profile_evidence(state: LoopState) -> tuple[str, list[str]]:
    """What the best configuration's profile says, and the parameters its bound points to first."""
    prof = state.best_profile
    if prof is None or state.template is None:
        return "", []
    m = prof.metrics
    bound = str(m.get("bound", ""))
    first = bound_first(state.template, bound)
    stalls = ", ".join(f"{k.replace('_', ' ')}" for k in dict(m.get("stalls", {})))
    text = (f"Profile of the best (Nsight Compute): {bound}-bound; DRAM {m.get('dram_pct', 0):.0f}% of peak, "
            f"SM {m.get('sm_pct', 0):.0f}%, occupancy {m.get('achieved_occupancy_pct', 0):.0f}% of "
            f"{m.get('theoretical_occupancy_pct', 0):.0f}%" + (f"; warps stall on {stalls}" if stalls else "")
            + ".")
    if bound == "memory" and float(m.get("dram_pct", 0)) >= 90:
        text += " DRAM is near its peak: little is left to gain by tuning."
    return text, first


def bound_first(template: Template, bound: str) -> list[str]:
    """The template's parameters of the kinds BOUND_FIRST names for a kernel of this bound."""
    kinds = BOUND_FIRST.get(bound, ())
    return list(dict.fromkeys(p.name for k in kinds for p in template.parameters
                              if param_kind(p.name, p.kind) == k and len(p.values) > 1))


def refinement(template: Template, best: dict, results: list, budget: int,
               first: list[str] | tuple[str, ...] = (), radius: int = 1,
               count: Callable[[Mapping[str, tuple]], int] | None = None) -> tuple[dict, list[str]]:
    """Neighbours of the best's values (up to `radius` places away), parameter by parameter, while
    the configurations the loop would measure of the grid (`count`, by default a GridCount of
    `results` that takes every configuration for feasible) fit the budget. Switches measured at
    one value only go first (the first round held them at their default: nothing is known of
    them, and a round that skipped them would leave them untried), then the parameters in
    `first` (the profile's choice, else the kernel cost's), then the rest in order of how much
    each moved the time (the slowest over the fastest of the best times per value).

    Each list of the grid the loop searches holds the template's default too, so a parameter's
    new values are crossed with the default of every other parameter the best moved away from:
    a refinement holds fewer parameters than the budget over their neighbours suggests."""
    count = count or GridCount(template, measured=results)
    effect = {}
    for p in template.parameters:
        per_value: dict = defaultdict(lambda: math.inf)
        for r in results:
            if r.ranked and p.name in r.config:
                per_value[r.config[p.name]] = min(per_value[r.config[p.name]], r.median_us)
        times = [t for t in per_value.values() if math.isfinite(t)]
        effect[p.name] = max(times) / min(times) if len(times) > 1 else 1.0
    tried = {p.name: {r.config.get(p.name) for r in results if r.config and p.name in r.config}
             for p in template.parameters}
    untried = {p.name for p in template.parameters if is_switch(p) and len(tried[p.name]) < 2}
    order = sorted((p.name for p in template.parameters),
                   key=lambda n: (n not in untried, n not in first, -effect[n]))
    values: dict[str, tuple] = {p.name: (best[p.name],) for p in template.parameters}
    used = []
    for name in order:
        p = template.parameter(name)
        trial = dict(values)
        trial[name] = neighbours(p.values, best[name], is_thread_count(p), radius)
        if trial[name] != values[name] and count(trial) <= budget:
            values = trial
            used.append(f"{name} (x{effect[name]:.2f})" if name not in untried else f"{name} (not yet tried)")
    return values, used


def refine_first(state: LoopState) -> tuple[list[str], str]:
    """The parameters a refinement varies first, and why: what the best's profile points to, else
    (no profile) what the kernel's cost at the device's peaks points to."""
    _, first = profile_evidence(state)
    if first:
        return first, "the profile"
    bound = cost_bound(state) if state.template is not None else ""
    first = bound_first(state.template, bound) if bound else []
    return first, f"the kernel's cost ({bound}-bound)" if first else ""


def refine_order_words(state: LoopState) -> str:
    """The order in which a refinement takes up the parameters, in words."""
    first, why = refine_first(state)
    then = f"the parameters {why} points to ({', '.join(first)}), then " if first else ""
    return f"switches not yet tried first, then {then}those that moved the time most"


def neighbours(values: tuple, best: ParamValue, threads: bool, radius: int = 1) -> tuple:
    """The best value, the ones up to `radius` places either side of it in the list, and for
    thread counts the multiples of 32 halfway to each side (192 and 384 around 256)."""
    ordered = sorted(values)
    i = ordered.index(best) if best in ordered else 0
    out = set(ordered[max(0, i - radius):i + radius + 1]) | {best}
    if threads and isinstance(best, int) and not isinstance(best, bool):
        for other in (ordered[i - 1] if i > 0 else None, ordered[i + 1] if i + 1 < len(ordered) else None):
            if other is None:
                continue
            mid = (best + other) // 2 // 32 * 32
            if mid not in (best, other) and mid >= 32:
                out.add(mid)
    return tuple(sorted(out))
