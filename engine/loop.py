"""The agent loop: rounds of plan -> template -> tune -> test -> analyse, every step an event.

Stage 1 turns the original kernel into a template: the generator proposes, the gate checks
(engine/gate.py), and a rejected proposal goes back to the generator with the reason. Stage 2
searches the accepted template with a tuning run (engine/tune.py) that appends to the loop's
session. The tester analyses each round; the loop stops at the round limit, when the best is
within `sol_target` of the speed of light, on a plateau, or when the planner says so.

The four roles come from a `Provider` (agents/: Claude, or offline rules), whose interface is
engine/agent_api.py. The engine never imports agents/: the command line hands providers in, the
first one leading and the rest taking over, in order, when one fails (`ProviderError`) — the
session keeps everything measured so far.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from .agent_api import LoopState, Provider, ProviderError, RoundRecord, SearchPlan
from .device import DeviceLimits
from .emitter import Controlled, Emitter
from .events import AgentCall, Analysis, Event, GateChecked, LoopFinished, LoopStarted, PlanMade, RoundStarted
from .events import SearchPlanned, TemplateProposed
from .gate import GateVerdict, check_proposal
from .inputs_cache import inputs_cache
from .proposal import EXTENSIONS, narrowed, source_diff
from .result import Result, config_key
from .search import STRATEGIES
from .header import run_header
from .session import SessionWriter, default_path
from .sol import sol_time_us, tensor_bound
from .template import Template, TemplateError
from .tune import Sink, TuneError, TuneOptions, TuneRun, peaks_for, resolve_device


class LoopError(TuneError):
    """A loop that cannot go on at all (the original kernel does not run, every provider failed)."""


@dataclass(frozen=True)
class LoopOptions:
    """How the loop runs; `tune` carries the device, timing, verification and session options."""

    tune: TuneOptions = field(default_factory=TuneOptions)
    rounds: int = 3
    sol_target: float = 0.9
    plateau: float = 0.02  # a round improving the best by less than this fraction ends the loop
    attempts: int = 3  # proposals per templating step before the round gives up
    budget: int = 0  # evaluations per round, at most; 0 = the tuner decides
    gate_timeout: float = 300.0  # seconds for the gate's worker to start, and as long again for its check
    templates_dir: Path | None = None  # default: beside the session file
    templatize_only: bool = False  # stage 1 alone (`kerntune templatize`)
    notes: tuple[str, ...] = ()  # said at the start (which agent, and why)


@dataclass
class LoopOutcome:
    """A finished loop: why it stopped, every round, and its verified best."""

    session_path: Path
    reason: str
    rounds: list[RoundRecord]
    original: Result | None
    best: Result | None
    best_round: int
    template: Template | None
    template_dir: Path | None
    limits: DeviceLimits
    backend: str
    cost_usd: float = 0.0
    agents: list[str] = field(default_factory=list)
    # No configuration beat the original: `best` is the original's own result, and this the
    # fastest configuration, which lost to it (None when no configuration was verified at all).
    beaten: Result | None = None

    @property
    def kept_original(self) -> bool:
        return self.best is not None and self.best is self.original

    @property
    def speedup(self) -> float | None:
        if self.best is None or self.original is None or not self.original.verified:
            return None
        if not self.best.median_us or not self.original.median_us:
            return None
        return self.original.median_us / self.best.median_us


class TuningLoop(Controlled):
    """Drives the loop; `run()` blocks, `stop()`, `pause()` and `resume()` may come from other threads.

    Each round's tuning run sends its events through the loop's emitter: one clock, one session
    file, and the loop's stop and pause reach the run in flight."""

    def __init__(self, original: Template, providers: Sequence[Provider], options: LoopOptions,
                 sinks: Sequence[Sink] = ()):
        if not providers:
            raise ValueError("the loop needs at least one provider")
        self.original = original
        self.providers = list(providers)
        self.options = options
        self.events = Emitter(sinks)
        self._active = 0
        self._cost = 0.0

    @property
    def provider(self) -> Provider:
        return self.providers[self._active]

    # events ------------------------------------------------------------------------------------
    def _emit(self, ev: Event) -> None:
        if isinstance(ev, AgentCall):
            self._cost += ev.cost_usd
        self.events.emit(ev)

    def note(self, text: str, source: str = "loop") -> None:
        self.events.note(text, source)

    # the loop ----------------------------------------------------------------------------------
    def run(self) -> LoopOutcome:
        """Measure the original, then the rounds; the session is written as it goes."""
        opts = self.options
        tune = opts.tune
        pending: list[str] = []
        backend, limits = resolve_device(tune.backend, tune.device, pending.append)
        limits = peaks_for(backend, tune.device, limits, tune.probe, pending.append)
        self.original.source_for(backend)  # fails early, in one line, without a source for the backend
        problem = self.original.problem(tune.problem, tune.overrides)
        path = tune.session_path or default_path(self.original.name)
        seed = tune.seed if tune.seed is not None else int(time.time_ns() % (1 << 31))
        search_seed = tune.search_seed if tune.search_seed is not None else tune.seed
        self.tune_options = replace(tune, seed=seed, search_seed=search_seed, session_path=path, resume=False,
                                    backend=backend)
        # the original kernel at its defaults is the session's default configuration
        header = run_header(self.original, backend, problem, limits, None, self.tune_options, {
            "strategy": "agent loop",
            "agent": self.provider.name,
            "model": getattr(self.provider, "model", ""),
            "rounds": opts.rounds,
            "sol_target": opts.sol_target,
            "plateau": opts.plateau,
            "budget": opts.budget,
        }, original_source=self.original.source_for(backend))
        self.events.open(SessionWriter(path, header), header)
        self.templates_dir = opts.templates_dir or path.with_name(path.stem + "-templates")
        self.backend, self.limits, self.problem = backend, limits, problem
        env = problem.values
        self.sol_us = sol_time_us(float(self.original.cost_bytes.evaluate(env)),
                                  float(self.original.cost_flops.evaluate(env)), limits,
                                  tensor=tensor_bound(self.original, backend))
        self.history: list[RoundRecord] = []
        self.best: Result | None = None
        self.best_round = 0
        self.template: Template | None = None
        self.template_dir: Path | None = None
        self.verdict: GateVerdict | None = None
        self.original_result: Result | None = None
        self.agents = [self.provider.name]
        try:
            with inputs_cache():  # every round's workers use the same input sets: each reference runs once
                return self._loop(pending)
        finally:
            self.events.writer.close()

    def _loop(self, pending: list[str]) -> LoopOutcome:
        opts = self.options
        self._emit(LoopStarted(self.events.now(), self.provider.name, opts.rounds, opts.sol_target,
                               getattr(self.provider, "model", ""), opts.budget))
        for text in (*opts.notes, *pending):
            self.note(text)
        # stage 1 alone needs no timing: the gate compares outputs, not speed
        original = None if opts.templatize_only else self._measure_original()
        reason = f"{opts.rounds} round{'s' if opts.rounds != 1 else ''} done"
        started = 0  # rounds begun: what the RoundStarted events counted
        for number in range(1, opts.rounds + 1):
            if self.events.stopped:
                reason = self.stop_reason
                break
            started = number
            self.events.wait_running()
            why = self._round(number, original)
            if why:
                reason = why
                break
        if self.events.stopped:
            reason = self.stop_reason
        best, best_round, beaten = self.best, self.best_round, None
        if (best is not None and original is not None and original.verified and original.median_us
                and best.median_us and original.median_us <= best.median_us):
            # a tuner never recommends a kernel slower than the one it was given
            self.note(f"no configuration beat the original kernel (best {best.median_us:.2f} us, original "
                      f"{original.median_us:.2f} us): the original stays", "loop")
            best, best_round, beaten = original, 0, best
        elif best is None and original is not None and original.verified:
            # nothing proposed was verified (every template failed the gate, or the provider had
            # nothing to propose): the original, verified at the start and re-verified on new
            # inputs, is still the best verified kernel
            self.note("no configuration was verified: the original kernel stays", "loop")
            best, best_round = original, 0
        speedup = (original.median_us / best.median_us
                   if best is not None and original is not None and original.verified and best.median_us
                   and original.median_us else 0.0)
        self._emit(LoopFinished(
            self.events.now(), reason, started, dict(best.config) if best else {},
            (best.median_us or 0.0) if best else 0.0, (original.median_us or 0.0) if original else 0.0, speedup,
            (best.sol_fraction or 0.0) if best else 0.0, str(self.template_dir or ""), round(self._cost, 6),
            best is not None and best is original))
        return LoopOutcome(self.events.writer.path, reason, list(self.history), original, best, best_round,
                           self.template, self.template_dir, self.limits, self.backend, self._cost,
                           list(self.agents), beaten)

    def _state(self, number: int) -> LoopState:
        return LoopState(
            round=number, rounds=self.options.rounds, backend=self.backend, limits=self.limits,
            problem=self.problem, original=self.original, original_result=self.original_result,
            template=self.template, template_dir=self.template_dir, history=tuple(self.history),
            best=self.best, best_round=self.best_round, sol_us=self.sol_us, sol_target=self.options.sol_target,
            budget=self.options.budget, last_verdict=self.verdict,
            say=lambda text, role: self.note(text, role), record=self._emit, now=self.events.now)

    def _call(self, role: str, *args):
        """Ask the active provider; when it fails, say so and hand the role to the next one."""
        while True:
            provider = self.provider
            try:
                return getattr(provider, role)(*args)
            except ProviderError as e:
                if self._active + 1 >= len(self.providers):
                    raise LoopError(f"the {provider.name} provider failed as {role}: {e}") from None
                self._active += 1
                nxt = self.provider
                self.agents.append(nxt.name)
                self.note(f"the {provider.name} provider failed as {role} ({e}); the {nxt.name} provider "
                          f"takes over: every result so far is kept", "loop")

    def _measure_original(self) -> Result | None:
        """The original kernel as given (its defaults), timed and verified like any configuration."""
        self.note("measuring the original kernel", "loop")
        opts = replace(self.tune_options, strategy="grid", budget=1, skip=(), profile_top=0)
        try:
            outcome = TuneRun(self.original, opts, emitter=self.events).run()
        except TuneError as e:
            raise LoopError(f"the original kernel cannot be measured: {e}") from None
        result = outcome.default_result or (outcome.results[0] if outcome.results else None)
        if result is None or not result.verified:
            message = result.message if result is not None else outcome.reason
            raise LoopError(f"the original kernel does not run on {self.limits.name}: "
                            f"{result.status if result else 'nothing evaluated'}: {message}")
        self.original_result = result
        return result

    def _round(self, number: int, original: Result | None) -> str | None:
        """One round; a reason to stop the loop, or None to go on."""
        self._emit(RoundStarted(self.events.now(), number, self.provider.name))
        plan = self._call("plan", self._state(number))
        self._emit(PlanMade(self.events.now(), number, self.provider.name, plan.text, plan.retemplate, plan.stop))
        if plan.stop:
            return f"the planner stopped: {_first_line(plan.text)}"
        if self.template is None or plan.retemplate:
            why = self._templatize(number)
            if why and self.template is None:
                return why
        if self.options.templatize_only:
            return "template accepted"
        assert self.template is not None and self.template_dir is not None
        search = self._plan_search(number)
        template = self.template
        try:
            template = narrowed(self.template, search.values)
        except TemplateError as e:
            self.note(f"the tuner's value lists do not fit the template ({e}); searching its own lists", "loop")
            search = replace(search, values={})
        self._emit(SearchPlanned(self.events.now(), number, self.provider.name, search.strategy, search.budget,
                                 {p.name: list(p.values) for p in template.parameters}, search.reason))
        # every configuration of this template is measured once in the session, the default too:
        # an earlier round's result of it stays what speedups are over
        earlier = [r for rec in self.history if rec.template_dir == self.template_dir for r in rec.results]
        skip = tuple(dict.fromkeys(config_key(r.config) for r in earlier))
        default_key = config_key(template.default_config())
        default_result = next((r for r in earlier if config_key(r.config) == default_key), None)
        opts = replace(self.tune_options, strategy=search.strategy, budget=search.budget, skip=skip,
                       default_result=default_result)
        try:
            outcome = TuneRun(template, opts, emitter=self.events).run()
        except TuneError as e:
            record = RoundRecord(number, self.provider.name, plan.text, self.template_dir, search, error=str(e))
            self.note(f"round {number} could not search: {e}", "loop")
        else:
            best = outcome.best if outcome.winner_ok else None
            if outcome.best is not None and not outcome.winner_ok:
                self.note(f"round {number}'s fastest configuration failed its re-check on new inputs: "
                          "it is not used", "loop")
            record = RoundRecord(number, self.provider.name, plan.text, self.template_dir, search,
                                 tuple(outcome.results), best, outcome.winner_ok, outcome.reason,
                                 profiles=tuple(outcome.profiles))
        previous_best = self.best
        if record.best is not None and (self.best is None or record.best.median_us < self.best.median_us):
            self.best, self.best_round = record.best, number
        self.history.append(record)
        if self.events.stopped:
            return self.stop_reason
        if record.reason == "interrupted":  # Ctrl-C reached the round's search: the loop ends with it
            return "interrupted"
        report = self._call("test", self._state(number), record)
        best = self.best
        self._emit(Analysis(self.events.now(), number, self.provider.name, report.text,
                            dict(best.config) if best else {}, (best.median_us or 0.0) if best else 0.0,
                            (original.median_us or 0.0) if original else 0.0,
                            (best.sol_fraction or 0.0) if best else 0.0, best is not None))
        if best is not None and best.sol_fraction and best.sol_fraction >= self.options.sol_target:
            return (f"the best is {100 * best.sol_fraction:.0f}% of the speed of light "
                    f"(target {100 * self.options.sol_target:.0f}%)")
        if number >= 2 and previous_best is not None and previous_best.median_us:
            gain = (previous_best.median_us - (best.median_us or previous_best.median_us)) / previous_best.median_us
            if gain < self.options.plateau:
                return (f"plateau: round {number} improved the best by {100 * max(gain, 0):.1f}% "
                        f"(less than {100 * self.options.plateau:.0f}%)")
        if report.stop:
            return f"the tester stopped: {_first_line(report.text)}"
        return None

    def _plan_search(self, number: int) -> SearchPlan:
        search = self._call("tune", self._state(number))
        if search.strategy not in STRATEGIES:
            self.note(f"unknown strategy {search.strategy!r}; using grid", "loop")
            search = replace(search, strategy="grid")
        cap = self.options.budget
        budget = max(int(search.budget), 0)
        if cap:
            budget = min(budget, cap) if budget else cap
        names = {p.name for p in self.template.parameters}
        values = {k: tuple(v) for k, v in search.values.items() if k in names and v}
        return replace(search, budget=budget, values=values)

    def _templatize(self, number: int) -> str:
        """Stage 1: proposals until one passes the gate; "" then, else why none did (the attempts
        ran out, or the last provider had nothing to propose)."""
        rejection: str | None = None
        proposer = self.provider
        for attempt in range(1, self.options.attempts + 1):
            if self.events.stopped:
                return self.stop_reason
            try:
                proposal = self._call("generate", self._state(number),
                                      rejection if self.provider is proposer else None)
            except LoopError as e:  # no provider has a template (left) to propose: the original stays
                said = f"{e.__context__ if isinstance(e.__context__, ProviderError) else e}"
                if rejection is None:
                    return f"no template to tune ({self.provider.name} provider): {said}"
                return (f"no proposed template passed the gate (last: {_first_line(rejection)}); "
                        f"{self.provider.name} provider: {said}")
            proposer = self.provider
            directory = self.templates_dir / f"round{number}-attempt{attempt}"
            source = proposal.sources.get(self.backend, "")
            diff = source_diff(self.original.source_for(self.backend), source, self.backend) if source else ""
            header = (f"Template of {self.original.name}, proposed by the {proposer.name} provider in round "
                      f"{number} (attempt {attempt}).\nWritten by kerntune; its defaults reproduce the original "
                      f"kernel (original.{EXTENSIONS[self.backend]}).")
            for text in proposal.notes:
                self.note(text, "generator")
            verdict = check_proposal(self.original, proposal, directory, backend=self.backend,
                                     device=self.tune_options.device, problem=self.problem, limits=self.limits,
                                     timeout=self.options.gate_timeout, header=header)
            spec = verdict.template.spec_text if verdict.template is not None else ""
            self._emit(TemplateProposed(self.events.now(), number, attempt, proposer.name, self.backend,
                                        tuple(p.name for p in proposal.parameters), proposal.default_config,
                                        spec, source, diff, proposal.summary))
            self._emit(GateChecked(self.events.now(), number, attempt, verdict.ok, verdict.reason, verdict.checks,
                                   verdict.seeds, str(directory)))
            self.verdict = verdict
            if verdict.ok:
                self.template, self.template_dir = verdict.template, directory
                self.note(f"template accepted: {len(proposal.parameters)} parameters "
                          f"({', '.join(p.name for p in proposal.parameters)}), written to {directory}", "gate")
                return ""
            rejection = verdict.reason  # the GateChecked event says it: no note of its own
        return f"no proposed template passed the gate (last: {_first_line(rejection or '')})"


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:200]
    return ""
