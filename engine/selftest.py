"""`kerntune selftest`: the verification protocol, proven on the user's own device.

A built-in template (templates/selftest/protocol) holds one honest kernel and one hostile kernel
per class of cheat the protocol defends against (HOSTILE), plus twins: configurations of the honest
kernel whose parameter the source never reads, so they build the same program. It is tuned through
the real run (worker, checks, timing, final check, the leaders' paired re-timing) and the result
says `caught k of k` (each hostile kernel failed with the status its class must get, none ranked)
and `ties found n of n` (each twin reported tied with the original). The certificate, with the
device, its driver and the date, is kept in the cache (engine/certificate.py) and recorded in
every later session's header.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kerntune import templates

from .certificate import save_certificate
from .evaluate import TimingPolicy
from .header import tool_version
from .result import config_key
from .session import load_session
from .template import load_template
from .tune import TuneOptions, TuneRun

SPEC = templates.HERE / "selftest" / "protocol" / "kernel.toml"

# MODE -> (the class of cheat, the statuses that catch it). A new class is a MODE in the
# template's sources and a line here.
HOSTILE: dict[int, tuple[str, tuple[str, ...]]] = {
    1: ("output left unwritten when it looks written", ("wrong_result",)),
    2: ("part of the output left unwritten", ("wrong_result",)),
    3: ("a test for the poison", ("wrong_result",)),
    4: ("launch counting", ("wrong_result",)),
    5: ("a write past the end of an output", ("out_of_bounds",)),
    6: ("a write before the start of an output", ("out_of_bounds",)),
    7: ("a write into an input", ("wrote_input",)),
    8: ("a dropped tail (correct only for whole blocks)", ("wrong_result",)),
    9: ("outputs that go wrong after its evaluation", ("wrong_result",)),
    10: ("outputs memoised and replayed", ("wrong_result",)),
}
TWINS = (1, 2)  # TWIN values of the honest kernel besides the original's 0: the same program
# Fixed timing, so that the launch counts the hostile kernels rely on are the same on any device.
TIMING = TimingPolicy(warmup=1, min_repeats=5, max_repeats=5, precision=0.0)


@dataclass(frozen=True)
class Verdict:
    """What the selftest found: every hostile class's status, and the twins found tied."""

    caught: tuple[str, ...]
    missed: tuple[str, ...]  # "class: what happened"
    ties: int
    twins: int
    tie_text: str
    same_program: int = 0  # twins found built to the same binary as the original (CUDA's cubins)

    @property
    def passed(self) -> bool:
        return not self.missed and self.ties == self.twins


def judge(results: Sequence[Any], tied: Sequence[Mapping[str, Any]], chosen: Mapping[str, Any] | None,
          same: Sequence[Mapping[str, Any]] = ()) -> Verdict:
    """Each hostile MODE caught with one of its statuses, never ranked; each twin tied with the
    configuration reported (the original, when the twins are found tied)."""
    by_mode: dict[int, Any] = {}
    for r in results:
        if r.config.get("TWIN", 0) == 0:
            by_mode[int(r.config.get("MODE", -1))] = r
    caught, missed = [], []
    for mode, (what, statuses) in HOSTILE.items():
        r = by_mode.get(mode)
        if r is None:
            missed.append(f"{what}: not measured")
        elif r.status in statuses and not r.ranked:
            caught.append(what)
        else:
            missed.append(f"{what}: {r.status}" + (f" ({r.message})" if r.message else ""))
    group = {config_key(c) for c in tied} | ({config_key(chosen)} if chosen is not None else set())
    twin_keys = [config_key({"MODE": 0, "TWIN": t}) for t in TWINS]
    original = config_key({"MODE": 0, "TWIN": 0})
    ties = sum(1 for k in twin_keys if k in group and original in group)
    text = (f"the twins (TWIN={', '.join(map(str, TWINS))}) and the original were reported tied" if ties == len(TWINS)
            else f"only {ties} of the twins were found tied with the original")
    built_alike = sum(1 for k in twin_keys if k in {config_key(c) for c in same})
    return Verdict(tuple(caught), tuple(missed), ties, len(TWINS), text, built_alike)


def run_selftest(backend: str = "auto", device: int = 0, sinks: Sequence[Callable] = (),
                 save: bool = True) -> tuple[Verdict, dict[str, Any]]:
    """Tune the selftest template on this device through the real run; (the verdict, the
    certificate kept in the cache)."""
    template = load_template(SPEC)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kerntune-selftest-") as tmp:
        opts = TuneOptions(backend=backend, device=device, probe=False, timing=TIMING,
                           session_path=Path(tmp) / "selftest.toml", command=("kerntune", "selftest"))
        outcome = TuneRun(template, opts, sinks).run()
        session = load_session(outcome.session_path)
    lead = session.leaders()
    tied = lead.tied_with_chosen() if lead is not None else []
    chosen = lead.configs[lead.chosen] if lead is not None else None
    same = []
    if lead is not None and lead.valid and len(lead.same_program) == len(lead.configs) and lead.same_program[lead.chosen]:
        group = lead.same_program[lead.chosen]
        same = [c for i, c in enumerate(lead.configs) if lead.same_program[i] == group and i != lead.chosen]
    verdict = judge(session.results(), tied, chosen, same)
    limits = outcome.limits
    cert = {"caught": len(verdict.caught), "hostile": len(HOSTILE), "ties": verdict.ties, "twins": verdict.twins,
            "missed": list(verdict.missed), "backend": limits.backend, "device": limits.name,
            "driver": limits.driver, "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "seconds": round(time.monotonic() - start, 1), "tool_version": tool_version()}
    if save:
        try:
            save_certificate(cert)
        except OSError as e:  # the verdict stands; only its record is lost
            cert["unsaved"] = f"{e.strerror or e}"
    return verdict, cert
