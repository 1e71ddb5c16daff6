"""How kerntune writes numbers: text output (text mode, `show`, the agent loop's lines) and the
dashboard's columns.

In text, times and rates keep three significant digits and never lose whole units: 1.23, 12.3,
123, 2889, 62803. The dashboard gives a time a fixed number of decimals by its size (1041.3,
5.85), so a column of them lines up. Fractions are percentages with one decimal; ratios have
two decimals and an x.
"""

from __future__ import annotations


def fmt_num(v: float | None) -> str:
    """A time (µs) or a rate (GB/s) with three significant digits, whole units kept ("-" if unknown)."""
    if v is None:
        return "-"
    a = abs(v)
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1 or a == 0:
        return f"{v:.2f}"
    return f"{v:.3g}"


def fmt_percent(fraction: float | None) -> str:
    """A fraction as a percentage with one decimal ("-" when unknown)."""
    return f"{100 * fraction:.1f}%" if fraction is not None else "-"


def fmt_ratio(ratio: float | None) -> str:
    """How many times: 1.07x ("-" when unknown)."""
    return f"{ratio:.2f}x" if ratio is not None else "-"


def fmt_speedup(base_us: float | None, us: float | None) -> str:
    """How many times faster than the default configuration ("-" without its time or this one's)."""
    return fmt_ratio(base_us / us) if base_us and us else "-"


def fmt_us(v: float | None) -> str:
    """The dashboard's time in µs: two decimals under 100, one under 10,000, then whole ones."""
    if v is None:
        return "-"
    if v >= 10000:
        return f"{v:,.0f}"
    if v >= 100:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_gbs(v: float | None) -> str:
    """The dashboard's bandwidth in GB/s with one decimal ("-" when unknown)."""
    return f"{v:.1f}" if v is not None else "-"
