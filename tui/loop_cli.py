"""The agent loop as text: each event as a line while it runs, then one leaderboard of every
round and the loop's result in a few lines (`summary_lines`, also printed when the dashboard
closes). The command line's launcher (tui/launch.py) runs the loop with it.
"""

from __future__ import annotations

import sys
from typing import Any

from kerntune.engine.events import Event, RunStarted
from kerntune.engine.loop import LoopOutcome
from kerntune.tui.terminal import printable


class LoopText:
    """An event sink that prints the loop as text, in the dashboard's words (tui/words.py): each
    round's run through a TextRenderer of its own, and at the end one leaderboard of every round."""

    def __init__(self, out: Any = None):
        from kerntune.tui.text import TextRenderer

        self.out = out or sys.stdout
        self._renderer = TextRenderer
        self.runs = TextRenderer(self.out)
        self.results: list = []  # the rounds before this one's

    def __call__(self, ev: Event) -> None:
        if isinstance(ev, RunStarted):  # each round counts its own progress
            self.results += self.runs.results
            self.runs = self._renderer(self.out)
        self.runs(ev)

    def finish(self, outcome: LoopOutcome, show_failed: bool = False) -> None:
        board = self._renderer(self.out)
        board.results = self.results + self.runs.results  # a demoted result replaced in its round
        board.default_result = outcome.original  # speedups over the original kernel
        name = outcome.template.name if outcome.template else ""
        board.finish(f"{name} - {outcome.limits.name}: every round", show_failed)
        for line in summary_lines(outcome):
            print(printable(line), file=self.out)


def summary_lines(outcome: LoopOutcome) -> list[str]:
    """The loop's result in a few lines: original, best, speedup, SOL, template, session, cost."""
    from kerntune.tui.numbers import fmt_num, fmt_percent, fmt_ratio
    from kerntune.tui.text import fmt_params

    lines = []
    orig = outcome.original
    if orig is not None:
        lines.append(f"original:  {fmt_num(orig.median_us)} us")
    best = outcome.best
    if outcome.beaten is not None:
        lost = outcome.beaten
        lines.append(f"best:      the original stays ({fmt_num(best.median_us)} us, 1.00x the original): the fastest "
                     f"configuration, {fmt_num(lost.median_us)} us {fmt_params(lost.config)} (round "
                     f"{_round_of(outcome, lost)}), did not beat it")
    elif outcome.kept_original:
        lines.append(f"best:      the original stays ({fmt_num(best.median_us)} us): no configuration was verified")
    elif best is not None:
        sol = f", {fmt_percent(best.sol_fraction)} of SOL" if best.sol_fraction else ""
        speed = f", {fmt_ratio(outcome.speedup)} the original" if outcome.speedup else ""
        lines.append(f"best:      {fmt_num(best.median_us)} us  {fmt_params(best.config)}  (round "
                     f"{outcome.best_round}{speed}{sol}; re-verified on new inputs)")
    else:
        lines.append("best:      none verified")
    if outcome.template_dir is not None:
        lines.append(f"template:  {outcome.template_dir}")
    if outcome.cost_usd:
        lines.append(f"agents:    {', '.join(outcome.agents)}; ${outcome.cost_usd:.4f}")
    lines.append(f"session:   {outcome.session_path}")
    return lines


def _round_of(outcome: Any, result: Any) -> str:
    for r in outcome.rounds:
        if getattr(r, "best", None) is result:
            return str(r.round)
    return "?"
