"""The `rules` provider: the four roles offline and deterministic.

- planner: round 1 templates the kernel and searches a grid of the template's space; later rounds
  refine around the best so far; it stops when there is nothing verified to refine around;
- generator: lifts the original's literals into parameters (agents/lift.py) and makes the rewrites
  its analysis proves safe on top (agents/rewrites.py); after a rejection it leaves out the
  rewrite or lift the gate named, else the last rewrite, else the riskiest lift, and notes why;
- tuner: the whole grid when it fits the budget, else a coarse grid (every other value, the
  default and the ends kept; the values the rewrites name first, when there are rewrites, those
  of a rewrite for memory-bound kernels only where the kernel's cost says it is one); then the
  neighbours of the best's values, the parameters that moved the time most first, and midpoints
  between thread counts;
- tester: best against the original and the template's default, % of SOL, failures by status.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from dataclasses import dataclass, replace

from kerntune.engine.agent_api import LoopState, Plan, ProviderError, Report, RoundRecord, SearchPlan
from kerntune.engine.device import DeviceLimits
from kerntune.engine.proposal import TemplateProposal
from kerntune.engine.template import ParamValue, Template

from . import rewrite_fastmath, rewrite_rowwise
from .analysis import fmt_config, round_analysis, sol_line, sol_table, us
from .kernel_tree import KernelTreeError, classify
from .lift import KINDS, Lift, Lifted, lift_template
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
        around = fmt_config(state.best.config)
        tried = sum(len(r.results) for r in mine)
        evidence, first = profile_evidence(state)
        order = (f"the parameters the profile points to first ({', '.join(first)}), then those that moved the "
                 "time most" if first else "those that moved the time most first")
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
            values = coarse_grid(template, budget, first)
            size = math.prod(len(v) for v in values.values())
            how = "the whole grid" if all(len(values[p.name]) == len(p.values) for p in template.parameters) \
                else "a coarse grid (every other value of the longest lists, the default kept)"
            if first:
                how = (f"a grid of the values the rewrites name first ({', '.join(sorted(first))}) and a coarse "
                       "grid of the rest, the defaults kept")
            return SearchPlan("grid", budget, values, f"{how}: {size} configurations")
        budget = state.budget or REFINE_BUDGET
        _, first = profile_evidence(state)
        # A neighbourhood measured to the last configuration is widened (values two, then three
        # places away...) until it holds something new: a round never re-proposes only what is known.
        widest = max((len(p.values) for p in template.parameters), default=1)
        for radius in range(1, widest + 1):
            values, order = refinement(template, state.best.config, mine, budget, first, radius)
            if unmeasured(values, mine):
                break
        lead = f"the profile's bound first ({', '.join(first)}), then " if first else ""
        near = "neighbours" if radius == 1 else f"values up to {radius} places from"
        return SearchPlan("grid", budget, values,
                          f"{near} the best's values, {lead}most influential first: " + ", ".join(order))

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
    apply_rewrites tool. Lifts and rewrites named in `dropped` are left out, `left_out` saying why."""
    lifted = lift_template(original, backend, limits, set(dropped)) if lift else \
        Lifted(None, [], ["literals not lifted: not asked for"])
    proposal, applied = compose(original, backend, limits, lifted.proposal, dropped, left_out)
    if proposal is not None and lifted.proposal is None:  # rewrites alone: say why nothing was lifted
        proposal = replace(proposal, notes=tuple(lifted.notes) + tuple(proposal.notes))
    return RulesTemplate(proposal, lifted, applied)


def coarse_grid(template: Template, budget: int, first: dict | None = None) -> dict[str, tuple[ParamValue, ...]]:
    """Value lists whose product fits the budget: the longest list loses a value, again and again
    (a thread count last among equals), and each list keeps values spread over its range, the
    default among them. A parameter in `first` starts from those values (the rewrites' choice),
    the others from two (the default and the far end) when `first` is given."""
    first = first or {}
    lists = {p.name: tuple(first[p.name]) if p.name in first else
             (spread(p.values, p.default, 2) if first else tuple(p.values)) for p in template.parameters}
    counts = {name: len(v) for name, v in lists.items()}
    threads = {p.name for p in template.parameters if p.description.startswith("threads")}
    while math.prod(counts.values()) > budget and max(counts.values()) > 1:
        name = max(counts, key=lambda n: (counts[n], n not in threads))
        counts[name] -= 1
    return {p.name: spread(lists[p.name], p.default, counts[p.name]) for p in template.parameters}


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


def param_kind(name: str, description: str = "") -> str:
    """threads, vector, unroll, flag, tile (what agents/lift.py would call the parameter), keep (data kept
    on chip between passes) or ''."""
    upper = name.upper()
    if KEEP_NAME.search(upper):
        return "keep"
    for kind, pattern in KINDS:
        if pattern.search(upper):
            return kind
    d = description.lower()
    for kind, words in (("threads", ("threads per block",)), ("vector", ("vector",)), ("unroll", ("unroll",))):
        if any(w in d for w in words):
            return kind
    return ""


def analysis_line(state: LoopState) -> str:
    """What the syntax tree says of the original kernel, and so which rewrites can apply."""
    try:
        a = classify(state.original.source_for(state.backend), state.original.entry)
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
    fast = rewrite_fastmath.fast_calls(state.original.source_for(state.backend), state.original.entry, state.backend)
    if fast.sites:
        reason += f"; FAST_MATH can switch its math calls to the hardware's fast approximations ({fast.switched()})"
    bound = cost_bound(state)
    by_cost = (f" By its cost it is {bound}-bound at this device's peaks" +
               (": fewer passes over memory and wider accesses first." if bound == "memory" else ".")) if bound else ""
    return f"Analysis: {a.name} is {what}{reason}.{by_cost}"


def chained(state: LoopState) -> bool:
    """Whether the row-wise rewrite can split a pass carried through an exponential into chains."""
    try:
        return rewrite_rowwise.analyse(state.original.source_for(state.backend), state.original.entry).chained
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
    kinds = BOUND_FIRST.get(bound, ())
    first = [p.name for k in kinds for p in state.template.parameters
             if param_kind(p.name, p.description) == k and len(p.values) > 1]
    stalls = ", ".join(f"{k.replace('_', ' ')}" for k in dict(m.get("stalls", {})))
    text = (f"Profile of the best (Nsight Compute): {bound}-bound; DRAM {m.get('dram_pct', 0):.0f}% of peak, "
            f"SM {m.get('sm_pct', 0):.0f}%, occupancy {m.get('achieved_occupancy_pct', 0):.0f}% of "
            f"{m.get('theoretical_occupancy_pct', 0):.0f}%" + (f"; warps stall on {stalls}" if stalls else "")
            + ".")
    if bound == "memory" and float(m.get("dram_pct", 0)) >= 90:
        text += " DRAM is near its peak: little is left to gain by tuning."
    return text, list(dict.fromkeys(first))


def unmeasured(values: dict, results: list) -> int:
    """How many configurations of the grid `values` no result in `results` measured."""
    names = list(values)
    seen = {tuple(r.config.get(n) for n in names) for r in results if r.config}
    return sum(1 for combo in itertools.product(*values.values()) if combo not in seen)


def refinement(template: Template, best: dict, results: list, budget: int,
               first: list[str] | tuple[str, ...] = (), radius: int = 1) -> tuple[dict, list[str]]:
    """Neighbours of the best's values (up to `radius` places away), parameter by parameter in
    order of how much each moved the time (the slowest over the fastest of the best times per
    value), while the configurations not yet measured fit the budget; the parameters in `first`
    (the profile's choice) go before the rest."""
    defaults = template.default_config()
    effect = {}
    for p in template.parameters:
        per_value: dict = defaultdict(lambda: math.inf)
        for r in results:
            if r.ranked and p.name in r.config:
                per_value[r.config[p.name]] = min(per_value[r.config[p.name]], r.median_us)
        times = [t for t in per_value.values() if math.isfinite(t)]
        effect[p.name] = max(times) / min(times) if len(times) > 1 else 1.0
    order = sorted((p.name for p in template.parameters), key=lambda n: (n not in first, -effect[n]))
    values: dict[str, tuple] = {p.name: (best[p.name],) for p in template.parameters}

    def size(v: dict) -> int:
        return math.prod(len(set(x) | {defaults[n]}) for n, x in v.items())

    known = sum(1 for r in results if r.config)
    used = []
    for name in order:
        p = template.parameter(name)
        trial = dict(values)
        trial[name] = neighbours(p.values, best[name], p.description.startswith("threads"), radius)
        if size(trial) <= budget or (size(trial) <= budget + known and unmeasured(trial, results) <= budget):
            values = trial
            used.append(f"{name} (x{effect[name]:.2f})")
    return values, used


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
