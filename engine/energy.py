"""Energy as an objective: joules per launch from NVML's total-energy counter, and the trade-off
between time and energy.

`--objective energy` (or `edp`, the energy-delay product) has the worker read the device's
total-energy counter (read only: kerntune never changes clocks or power limits) around a batch
of back-to-back launches of each verified configuration, long enough for the counter to move
(engine/timing.py), and record joules per launch in its result. The search then minimises
that cost; the leaderboard, `show` and the dashboard give each result's energy and the Pareto
front of time against energy, with its two ends named: the fastest and the most frugal.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from .result import Result

OBJECTIVES = ("time", "energy", "edp")


class NoEnergyCounter(RuntimeError):
    """The device has no energy counter kerntune can read; the message is one line."""


def cost(r: Result, objective: str) -> float | None:
    """What the objective minimises for a result: microseconds, joules per launch, or joules x
    seconds (None where the result has no time, or no energy for an energy objective)."""
    if not r.ranked:
        return None
    if objective == "time":
        return r.median_us
    if r.energy_j is None:
        return None
    return r.energy_j if objective == "energy" else r.energy_j * r.median_us * 1e-6


def pareto(results: Iterable[Result]) -> list[Result]:
    """The results no other beats in both time and energy, fastest first (the most frugal last)."""
    measured = sorted((r for r in results if r.ranked and r.energy_j is not None),
                      key=lambda r: (r.median_us, r.energy_j))
    front: list[Result] = []
    for r in measured:
        if not front or r.energy_j < front[-1].energy_j:
            front.append(r)
    return front


def best_by(results: Sequence[Result], objective: str) -> Result | None:
    """The result the objective ranks first."""
    costs = [(c, i) for i, r in enumerate(results) if (c := cost(r, objective)) is not None]
    return results[min(costs)[1]] if costs else None


def summary(results: Sequence[Result], objective: str) -> dict[str, Any] | None:
    """What `show --json` says of energy (None when no result has it)."""
    front = pareto(results)
    if not front:
        return None

    def row(r: Result) -> dict[str, Any]:
        return {"config": dict(r.config), "median_us": r.median_us, "energy_j": r.energy_j}

    best = best_by(results, objective if objective != "time" else "energy")
    return {"objective": objective, "measured": sum(1 for r in results if r.energy_j is not None),
            "pareto": [row(r) for r in front], "fastest": row(front[0]), "most_frugal": row(front[-1]),
            "best": row(best) if best is not None else None}


def counter_reader(backend: str, device: int, pci_bus_id: str = "") -> Any:
    """A function reading the device's total energy in joules (None for a reading that failed);
    NoEnergyCounter where there is none (any device but an NVIDIA GPU of Volta or later, or no
    NVML)."""
    if backend != "cuda":
        raise NoEnergyCounter(f"no energy counter on the {backend} backend: energy is read from NVML's "
                              "total-energy counter of an NVIDIA GPU")
    from . import nvml

    try:
        read = nvml.energy_reader(device, pci_bus_id)
    except nvml.NVMLUnavailable as e:
        raise NoEnergyCounter(f"no energy counter: {e}") from None

    def joules() -> float | None:  # a reading NVML cannot give is no reading, never a failure of the run
        try:
            return read()
        except Exception:
            return None

    return joules

