"""Every event as words, once: the dashboard's plan panel, the text mode and the agent loop's text
all describe an event with `describe`, so the same model call reads the same everywhere.

An event's words have a source (who speaks: the engine, the loop, a role of the agent loop, a
provider) and a kind that the dashboard colours. Text output writes the source before the words,
except the engine's; the dashboard writes it in bold before them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kerntune.engine import events
from kerntune.engine.events import AgentCall, Event

from kerntune.engine.energy import best_by, pareto
from kerntune.engine.result import ORIGINAL, Result, config_key, config_text, value_text

from .numbers import fmt_us
from .terminal import printable


def fmt_value(v: Any) -> str:
    """A parameter's value as written in a configuration: flags as 0 and 1; what a file wrote in
    it is printable (tui/terminal.py)."""
    return printable(value_text(v))


def fmt_config(config: Mapping[str, Any]) -> str:
    """A configuration as `NAME=value` pairs (engine/result.py's one formatter), printable."""
    return config_text(config, text=printable)


def fmt_params(config: Mapping[str, Any]) -> str:
    """A configuration's parameters; the original kernel (no parameters) is labelled `original`."""
    return fmt_config(config) or ORIGINAL


@dataclass(frozen=True)
class Words:
    """One event in words: who says it, what, and how the dashboard colours it."""

    source: str
    text: str
    kind: str = "note"  # note, info, best, good, warn, error

    def __post_init__(self) -> None:  # the words hold names and messages from files: printable, one line
        object.__setattr__(self, "source", printable(self.source))
        object.__setattr__(self, "text", printable(self.text))

    @property
    def speaker(self) -> str:
        """The name written before the words: every source but the engine."""
        return "" if self.source in ("engine", "") else self.source

    def line(self) -> str:
        """The words as a line of text output; the engine's own notes start with `note:`."""
        if self.speaker:
            return f"{self.speaker}: {self.text}"
        return f"note: {self.text}" if self.kind == "note" else self.text


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def describe(ev: Event) -> Words | None:
    """The words for one event; None for a plain result, which the leaderboard shows instead."""
    if isinstance(ev, events.Note):
        return Words(ev.source, ev.text)
    if isinstance(ev, events.ConfigEvaluated):
        if not ev.replaces:
            return None
        r = ev.result  # a demotion by a later check, not a new measurement
        return Words("engine", f"demoted {fmt_config(r.config)} to {r.status}: {r.message}", "error")
    return _run_words(ev) or _loop_words(ev)


def _run_words(ev: Event) -> Words | None:
    """A tuning run's steps: start, space, best so far, sanitizer, winner's re-check, end, profiles."""
    if isinstance(ev, events.RunStarted):
        resumed = f", resuming after {ev.resumed} results" if ev.resumed else ""
        budget = f", budget {ev.budget}" if ev.budget else ""
        return Words("engine", f"tuning {ev.template} at {fmt_config(ev.problem)} on {ev.device} ({ev.backend}), "
                     f"{ev.strategy} search{budget}{resumed}", "info")
    if isinstance(ev, events.SpaceBuilt):
        pruned = "; ".join(f"{k}: {v}" for k, v in ev.pruned.items())
        return Words("engine", f"space: {ev.feasible} feasible of {ev.total}"
                     + (f" (pruned by {pruned})" if pruned else ""), "info")
    if isinstance(ev, events.BestImproved):
        speed = f", {ev.speedup:.2f}x the default" if ev.speedup else ""
        return Words("engine", f"new best {fmt_us(ev.median_us)} us: {fmt_config(ev.config)}{speed}", "best")
    if isinstance(ev, events.ConfigSanitized):
        return Words("engine", f"{fmt_config(ev.config)}: {ev.message}", "good" if ev.ok else "error")
    if isinstance(ev, events.WinnerVerified):
        seeds = f" (seeds {', '.join(map(str, ev.seeds))})" if ev.seeds else ""
        verdict = f"passed{seeds}" if ev.ok else f"FAILED{seeds}: {ev.message}"
        return Words("engine", f"winner re-verified on new inputs: winner {fmt_params(ev.config)} {verdict}",
                     "good" if ev.ok else "error")
    if isinstance(ev, events.LeadersRetimed):
        return Words("engine", leaders_text(ev), "best")
    if isinstance(ev, events.RunFinished):
        return Words("engine", f"finished ({ev.reason}): {ev.evaluated} evaluated, {ev.verified} verified", "info")
    if isinstance(ev, events.ConfigProfiled):
        rank = f"#{ev.rank} " if ev.rank else ""
        if not ev.ok:
            return Words("profiler", f"{rank}{fmt_config(ev.config)} not profiled: {ev.message}", "warn")
        from kerntune.engine.profile import ProfileMetrics

        return Words("profiler", f"{rank}{fmt_config(ev.config)}: {ProfileMetrics.from_dict(ev.metrics).summary()}")
    return None


def tie_marks(leaders: "events.LeadersRetimed | None") -> dict[str, str]:
    """Marks after a rank from the leaders' paired re-timing: `*` the configuration reported,
    `=` one tied with it (the paired times cannot tell them apart)."""
    if leaders is None or not leaders.valid:
        return {}
    marks = {config_key(c): "=" for c in leaders.tied_with_chosen()}
    marks[config_key(leaders.configs[leaders.chosen])] = "*"
    return marks


def leaders_text(ev: "events.LeadersRetimed") -> str:
    """The paired re-timing's verdict in one line: what is reported, its speedup over the
    original with its interval, and what it is tied with."""
    if not ev.valid:
        return "the leaders were timed again together, but the record does not hold together"
    c = ev.chosen
    what = fmt_params(ev.configs[c]) if c != ev.original else f"the original ({fmt_params(ev.configs[c])})"
    speed = ""
    if ev.original >= 0 and c != ev.original:
        speed = f", {ev.speedup[c]:.2f}x the original (95% interval {ev.low[c]:.2f}-{ev.high[c]:.2f})"
    tied = ev.tied_with_chosen()
    ties = f"; tied with {'; '.join(fmt_params(x) for x in tied)}" if tied else ""
    same = [i for i, g in enumerate(ev.same_program) if g and ev.same_program[c] == g and i != c]
    if same:
        ties += f"; {', '.join(fmt_params(ev.configs[i]) for i in same)} build the same program"
    return (f"leaders timed together ({len(ev.configs)} configurations, {_plural(ev.rounds, 'paired round')} "
            f"of {ev.launches} launches): {what} {fmt_us(ev.median_us[c])} us{speed}{ties}; {ev.reason}")


def _loop_words(ev: Event) -> Words | None:
    """The agent loop's steps: its start and rounds, plans, templates and the gate, searches, calls."""
    if isinstance(ev, events.LoopStarted):
        model = f" ({ev.model})" if ev.model else ""
        sol = f", stop at {100 * ev.sol_target:.0f}% of SOL" if ev.sol_target else ""
        return Words("loop", f"{ev.agent} agents{model}, up to {_plural(ev.rounds, 'round')}{sol}", "info")
    if isinstance(ev, events.RoundStarted):
        return Words("loop", f"round {ev.round} ({ev.agent})", "info")
    if isinstance(ev, events.PlanMade):
        return Words("planner", ev.text)
    if isinstance(ev, events.TemplateProposed):
        params = ", ".join(ev.parameters) or "no parameters"
        return Words("generator", f"template proposed (attempt {ev.attempt}): {params}"
                     + (f"; {ev.summary}" if ev.summary else ""))
    if isinstance(ev, events.GateChecked):
        if ev.ok:
            return Words("gate", f"template accepted: {', '.join(ev.checks) or 'all checks passed'}", "good")
        return Words("gate", f"template rejected: {ev.reason}", "error")
    if isinstance(ev, events.SearchPlanned):
        budget = f", budget {ev.budget}" if ev.budget else ""
        values = "; ".join(f"{k} {v}" for k, v in ev.values.items())
        return Words("tuner", f"{ev.strategy} search{budget}" + (f" over {values}" if values else "")
                     + (f": {ev.reason}" if ev.reason else ""))
    if isinstance(ev, events.Analysis):
        return Words("tester", ev.text)
    if isinstance(ev, events.AgentCall):
        return Words(ev.agent, f"{ev.role}: {_tokens(ev)}", "info")
    if isinstance(ev, events.LoopFinished):
        speed = f", {ev.speedup:.2f}x the original" if ev.speedup else ""
        kept = "; no configuration beat the original, which stays" if ev.kept_original else ""
        return Words("loop", f"finished ({ev.reason}) after {_plural(ev.rounds, 'round')}{speed}{kept}", "good")
    return None


def _tokens(ev: AgentCall) -> str:
    """A model call's tokens, cost and time. The tokens in count every input token: the model's
    `input_tokens` leaves out those read from the prompt cache and those written to it."""
    cache = [f"{n} {what}" for n, what in ((ev.cache_read_tokens, "read from cache"),
                                          (ev.cache_write_tokens, "written to cache")) if n]
    cached = f" ({', '.join(cache)})" if cache else ""
    cost = f", ${ev.cost_usd:.4f}" if ev.cost_usd else ""
    return (f"{ev.input_tokens + ev.cache_read_tokens + ev.cache_write_tokens} tokens in{cached}, "
            f"{ev.output_tokens} out{cost}, {ev.seconds:.1f} s")


def front_lines(results: Sequence[Result], objective: str) -> list[str]:
    """The energy measured and the Pareto front in words (none when no result has energy)."""
    front = pareto(results)
    if not front:
        return []

    def said(r: Result) -> str:
        return f"{r.median_us:.4g} us, {1e6 * r.energy_j:.4g} uJ per launch: {fmt_config(r.config)}"

    measured = sum(1 for r in results if r.energy_j is not None)
    lines = [f"energy per launch measured for {measured} configurations (NVML's total-energy counter, read only; "
             f"objective {objective})",
             "Pareto front of time against energy (none faster is more frugal), fastest first:"]
    lines += [f"    {said(r)}" for r in front]
    lines.append(f"ends: the fastest {said(front[0])}; the most frugal {said(front[-1])}")
    if objective != "time":
        best = best_by(results, objective)
        if best is not None:
            lines.append(f"best by {objective}: {said(best)}")
    return lines
