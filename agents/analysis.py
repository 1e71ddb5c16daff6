"""What the agents say about results: speed-of-light headroom, a round's analysis, result tables.

Both providers use these: the rules speak them as they are, and Claude reads them through its
tools (read_results) before it writes its own analysis.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Sequence

from kerntune.engine.agent_api import LoopState, RoundRecord
from kerntune.engine.result import FAILED, Result, config_label, ranked
from kerntune.engine.sol import sol_time_us, tensor_bound


def us(v: float | None) -> str:
    """Microseconds, to a sensible precision."""
    return "-" if v is None else (f"{v:.1f} us" if v >= 100 else f"{v:.2f} us")


def sol_line(state: LoopState) -> str:
    """The speed-of-light bound of the problem, and how close the original and the best come to it."""
    p = state.problem.label()
    if state.sol_us is None:
        return (f"Speed of light at {p}: unknown (no peak rates for {state.limits.name}; "
                "`kerntune probe` measures them), so rounds stop by the plateau rule only.")
    parts = [f"Speed of light at {p}: {us(state.sol_us)}"]
    orig = state.original_result
    if orig is not None and orig.median_us:
        parts.append(f"the original runs at {100 * state.sol_us / orig.median_us:.0f}% of it")
    if state.best is not None and state.best.median_us:
        parts.append(f"the best so far at {100 * state.sol_us / state.best.median_us:.0f}%")
    parts.append(f"the loop stops at {100 * state.sol_target:.0f}%")
    return "; ".join(parts) + "."


def sol_table(state: LoopState) -> str:
    """The speed-of-light time of every problem size of the spec, the tuned one marked."""
    if state.sol_us is None:
        return ""
    o = state.original
    parts = []
    for p in o.problems:
        t = sol_time_us(float(o.cost_bytes.evaluate(p.values)), float(o.cost_flops.evaluate(p.values)), state.limits,
                        tensor=tensor_bound(o, state.limits.backend))
        mark = " (tuned here)" if dict(p.values) == dict(state.problem.values) else ""
        parts.append(f"{p.label()} {us(t)}{mark}")
    return "Speed of light per problem size: " + ", ".join(parts) + "."


def failures(results: Iterable[Result]) -> str:
    """Failed configurations by status, each with its first configuration and message."""
    by: Counter[str] = Counter()
    first: dict[str, Result] = {}
    for r in results:
        if r.status in FAILED:
            by[r.status] += 1
            first.setdefault(r.status, r)
    if not by:
        return "none"
    parts = []
    for status, n in by.most_common():
        r = first[status]
        detail = f" (first: {config_label(r.config)}: {' '.join(r.message.split())[:120]})" if r.message else ""
        parts.append(f"{status} {n}{detail}")
    return "; ".join(parts)


def round_analysis(state: LoopState, record: RoundRecord) -> str:
    """The tester's analysis of a round: best against the original and SOL, failures by status."""
    results = list(record.results)
    if record.error:
        return f"Round {record.round}: the search could not run: {record.error}."
    verified = [r for r in results if r.verified]
    suspect = [r for r in results if r.status == "suspect"]
    head = (f"Round {record.round}: {len(results)} configurations evaluated ({record.reason}), "
            f"{len(verified)} verified; failures: {failures(results)}.")
    lines = [head]
    orig = state.original_us
    if record.best is not None:
        b = record.best
        vs = f", {orig / b.median_us:.2f}x the original ({us(orig)})" if orig and b.median_us else ""
        # the default is measured once per template, in the first round that searched it
        default = _default_result(state, [*results, *(r for rec in state.history
                                                      if rec.template_dir == state.template_dir for r in rec.results)])
        vs_default = (f", {default.median_us / b.median_us:.2f}x the template's default ({us(default.median_us)})"
                      if default is not None and default.ranked and b.median_us else "")
        sol = f"; {100 * b.sol_fraction:.0f}% of SOL ({us(b.sol_us)})" if b.sol_fraction else ""
        spread = f" (spread {100 * b.spread:.0f}%)" if b.spread is not None else ""
        lines.append(f"Best verified this round: {config_label(b.config)}, {us(b.median_us)}{spread}{vs}{vs_default}"
                     f"{sol}; re-checked on new inputs: passed.")
    elif record.winner_ok is False:
        lines.append("The fastest configuration failed its re-check on new inputs: this round has no result.")
    else:
        lines.append("No configuration was verified this round.")
    mine = [*results, *(r for rec in state.history if rec.template_dir == state.template_dir
                        and rec is not record for r in rec.results)]
    for line in never_verified(state, mine):
        lines.append(line)
    if suspect:
        lines.append(f"{len(suspect)} configuration(s) measured faster than the speed of light: flagged "
                     "suspect, not ranked (a broken measurement or cost model, not a win).")
    if state.best is not None and state.best_round != record.round:
        lines.append(f"The best overall stays {config_label(state.best.config)} from round {state.best_round} "
                     f"({us(state.best.median_us)}).")
    lines.append(sol_line(state))
    return "\n".join(lines)


def never_verified(state: LoopState, results: Sequence[Result]) -> list[str]:
    """A line for each parameter of the template none of whose values but the default verified
    in any configuration measured with it (a knob that is wrong for this kernel, as lifted)."""
    if state.template is None:
        return []
    out = []
    for p in state.template.parameters:
        other = [r for r in results if r.config and p.name in r.config and r.config[p.name] != p.default]
        if other and not any(r.verified for r in other):
            tried = sorted({r.config[p.name] for r in other}, key=lambda v: (str(type(v)), v))
            out.append(f"{p.name}: none of its values but the default {p.default} verified "
                       f"({len(other)} configuration(s) with {', '.join(map(str, tried))}, "
                       f"failures: {failures(other)}): as lifted it is no knob of this kernel.")
    return out


def _default_result(state: LoopState, results: Sequence[Result]) -> Result | None:
    if state.template is None:
        return None
    default = state.template.default_config()
    for r in results:
        if dict(r.config) == default:
            return r
    return None


def results_table(results: Sequence[Result], limit: int = 15) -> str:
    """The fastest verified results and a line of failures, as plain text for a model to read."""
    board = ranked(results)
    lines = [f"{len(results)} evaluated, {len(board)} verified and ranked; failures: {failures(results)}"]
    for i, r in enumerate(board[:limit]):
        sol = f" {100 * r.sol_fraction:.0f}% SOL" if r.sol_fraction else ""
        spread = f" spread {100 * r.spread:.0f}%" if r.spread is not None else ""
        lines.append(f"{i + 1}. {config_label(r.config)}: {us(r.median_us)}{spread}{sol}")
    for r in results:
        if r.status == "suspect":
            lines.append(f"suspect (faster than SOL, not ranked): {config_label(r.config)}: {us(r.median_us)}")
    return "\n".join(lines)
