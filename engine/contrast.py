"""Why is row A faster than row B: two results side by side.

The parameters that differ; each one's time with its 95% interval (from its own raw times, and
the paired median when both were re-timed with the leaders); registers, shared and local memory,
spills, occupancy, bandwidth; and, where Nsight Compute profiled both, every metric it read,
the largest relative differences first. `kerntune show SESSION --compare A B` and the
dashboard's comparison print the same lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .events import LeadersRetimed
from .printable import printable
from .result import Result, config_key
from .retime import timing_interval


@dataclass(frozen=True)
class Contrast:
    """Two results compared: (label, A's value, B's value) rows, as text and numbers."""

    a: Result
    b: Result
    params: tuple[tuple[str, Any, Any], ...]
    figures: tuple[tuple[str, str, str], ...]
    metrics: tuple[tuple[str, float, float], ...]  # largest relative difference first
    verdict: str


def _flat(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in (metrics or {}).items():
        if isinstance(v, Mapping):  # the stall reasons
            out.update({f"{k}: {n}": float(x) for n, x in v.items() if _is_number(x)})
        elif _is_number(v):
            out[str(k)] = float(v)
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v


def contrast(a: Result, b: Result, metrics_a: Mapping[str, Any] | None = None,
             metrics_b: Mapping[str, Any] | None = None, leaders: LeadersRetimed | None = None) -> Contrast:
    """A and B side by side (`metrics_*`: Nsight Compute's readings, `leaders`: the paired re-timing)."""
    keys = list(dict.fromkeys([*a.config, *b.config]))
    params = tuple((k, a.config.get(k), b.config.get(k)) for k in keys if a.config.get(k) != b.config.get(k))
    paired = _paired(leaders, a, b)
    figures: list[tuple[str, str, str]] = [("status", a.status, b.status)]
    if a.median_us is not None or b.median_us is not None:
        figures.append(("median us (95% interval)", _time(a), _time(b)))
    if paired is not None:
        figures.append(("paired median us", f"{paired[0]:.4g}", f"{paired[1]:.4g}"))
    for label, get in (("registers per thread", lambda r: r.resources and r.resources.registers),
                       ("shared bytes (static)", lambda r: r.resources and r.resources.shared_static),
                       ("local bytes", lambda r: r.resources and r.resources.local_bytes),
                       ("spilled bytes", lambda r: r.resources and r.resources.spills),
                       ("occupancy", lambda r: None if r.occupancy is None else f"{100 * r.occupancy:.0f}%"),
                       ("bandwidth GB/s", lambda r: None if r.bandwidth_gbs is None else f"{r.bandwidth_gbs:.4g}"),
                       ("% of speed of light",
                        lambda r: None if r.sol_fraction is None else f"{100 * r.sol_fraction:.1f}%"),
                       ("energy per launch", lambda r: None if getattr(r, "energy_j", None) is None
                        else f"{1e6 * r.energy_j:.4g} uJ"),
                       ("grid", lambda r: " x ".join(map(str, r.grid)) or None),
                       ("block", lambda r: " x ".join(map(str, r.block)) or None)):
        va, vb = get(a), get(b)
        if va is not None or vb is not None:
            figures.append((label, "-" if va is None else str(va), "-" if vb is None else str(vb)))
    fa, fb = _flat(metrics_a), _flat(metrics_b)
    both = [(k, fa[k], fb[k]) for k in fa if k in fb and fa[k] != fb[k]]
    both.sort(key=lambda m: (-abs(m[1] - m[2]) / max(abs(m[1]), abs(m[2]), 1e-30), m[0]))
    return Contrast(a, b, params, tuple(figures), tuple(both), _verdict(a, b, paired))


def _time(r: Result) -> str:
    if r.median_us is None:
        return "-"
    low, high = timing_interval(r)
    return f"{r.median_us:.4g} ({low:.4g}-{high:.4g})"


def _paired(leaders: LeadersRetimed | None, a: Result, b: Result) -> tuple[float, float] | None:
    if leaders is None or not leaders.valid:
        return None
    keys = [config_key(c) for c in leaders.configs]
    ka, kb = config_key(a.config), config_key(b.config)
    if ka in keys and kb in keys:
        return leaders.median_us[keys.index(ka)], leaders.median_us[keys.index(kb)]
    return None


def _verdict(a: Result, b: Result, paired: tuple[float, float] | None) -> str:
    if a.median_us is None or b.median_us is None:
        return "one of them has no time: only what was recorded is compared"
    ta, tb = paired if paired is not None else (a.median_us, b.median_us)
    if paired is None:
        (la, ha), (lb, hb) = timing_interval(a), timing_interval(b)
        if la <= hb and lb <= ha:
            return (f"their own timings' 95% intervals overlap: A at {ta:.4g} us and B at {tb:.4g} us are not told "
                    "apart")
    faster, ratio = ("A", tb / ta) if ta <= tb else ("B", ta / tb)
    how = "in the paired re-timing" if paired is not None else "by their own timings"
    return f"{faster} is {ratio:.3f}x faster {how}"


def contrast_lines(c: Contrast, label_a: str = "A", label_b: str = "B", top: int = 12) -> list[str]:
    """The comparison as lines of text (every value from the session written printable)."""
    rows: list[tuple[str, str, str]] = []
    rows += [(f"{k}", printable(va), printable(vb)) for k, va, vb in c.params] or [("parameters", "the same", "")]
    rows += list(c.figures)
    width = max(len(printable(r[0])) for r in rows) + 2
    wa = max([len(label_a)] + [len(printable(r[1])) for r in rows]) + 2
    out = [f"{'':<{width}}{label_a:<{wa}}{label_b}"]
    out += [f"{printable(k):<{width}}{printable(va):<{wa}}{printable(vb)}" for k, va, vb in rows]
    if c.metrics:
        out.append(f"Nsight Compute, largest differences first ({min(top, len(c.metrics))} of {len(c.metrics)}):")
        for k, va, vb in c.metrics[:top]:
            out.append(f"  {printable(k):<{width - 2}}{va:<{wa}.4g}{vb:.4g}")
    out.append(c.verdict)
    return out

