"""Outputs against their reference: a tolerance by dtype, NaN and Inf where the reference has none.

Each element's tolerance is `atol + rtol * max(|ref|, FLOOR * the row's typical magnitude)`: an
element that is small because its terms cancel (a sum near zero) is held to the precision of the
terms, not to its own size, so an honest reduction in another order passes. A calibration
(engine/checks.py) may widen rtol and atol from a high quantile of the original kernel's errors
and allow a few elements beyond them (`spare`: as many as the original had, times SPARE_FACTOR,
each within `cap`), never every element's tolerance from the original's single worst one.

`Expected` prepares a reference output once (its values in the working precision, each element's
tolerance, where the reference itself is NaN or infinite); `compare` says how far an output is
from it, as a fraction of the tolerance, and what is wrong when it is too far. The host's
comparison is the authority: a device that compares (engine/checks.py) only decides when
nothing needs reading back.
"""

from __future__ import annotations

import copy
import functools
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .template import Argument

# Tolerances by dtype: (relative, absolute). Outputs are compared as
# |out - ref| <= atol + rtol * |ref| elementwise.
TOLERANCE = {
    "float16": (1e-2, 1e-3),
    # 8 significant bits: 1.6e-2 is two units in the last place, as in torch.testing's default
    "bfloat16": (1.6e-2, 1e-3),
    "float32": (1e-5, 1e-6),
    "float64": (1e-10, 1e-12),
}


# An element's tolerance is relative to at least this fraction of the root mean square of its row
# (the output's last dimension)
FLOOR = 0.25
# A calibrated output may have this many times the original's share of elements beyond its
# tolerance, plus SPARE_MIN
SPARE_FACTOR = 4.0
SPARE_MIN = 2


class Expected:
    """A reference output prepared once for fast comparisons: values in the working precision,
    the tolerance of each element, and where the reference itself is NaN or infinite."""

    def __init__(self, ref: np.ndarray, dtype: str, arg: Argument, scale: float = 1.0,
                 values: np.ndarray | None = None, spare: tuple[float, float] = (0.0, 1.0)):
        # `values`: `ref` in the working precision already (kept with the input set: a large
        # float16 output costs more to convert than to read back)
        self.shape = ref.shape
        self.dtype = dtype
        self.device: Any = None  # `values` on the device, uploaded when a device comparison first needs it
        self.exact = dtype not in TOLERANCE
        self.spare = 0
        self.cap = 1.0
        if self.exact:
            self.values = np.ascontiguousarray(ref).ravel()
            return
        self._tolerance(arg, scale, spare)
        work = np.float64 if dtype == "float64" else np.float32
        if values is not None and values.dtype == work and values.size == ref.size:
            self.values = values.ravel()
        else:
            self.values = ref.astype(work).ravel()

    def _tolerance(self, arg: Argument, scale: float, spare: tuple[float, float] = (0.0, 1.0)) -> None:
        rtol, atol = TOLERANCE[self.dtype]
        # `scale`: the calibration's widening of the dtype's default (never of the spec's own)
        self.rtol = arg.rtol if arg.rtol is not None else rtol * scale
        self.atol = arg.atol if arg.atol is not None else atol * scale
        # `spare`: (the original's share of elements beyond the calibrated tolerance, how far
        # beyond it the worst was): a candidate may have a few more, never much further out
        share, cap = spare
        size = math.prod(self.shape)
        self.spare = math.ceil(SPARE_FACTOR * share * size) + SPARE_MIN if share > 0 else 0
        self.cap = max(1.0, cap)

    def rescaled(self, arg: Argument, scale: float, spare: tuple[float, float] = (0.0, 1.0)) -> "Expected":
        """The same reference with the dtype's default tolerance widened `scale` times: its values
        (and their copy on the device) shared, nothing converted again."""
        other = copy.copy(self)
        other.__dict__.pop("tol", None)  # the only cached property that depends on the tolerance
        if not self.exact:
            other._tolerance(arg, scale, spare)
        return other

    # Where the reference is NaN or infinite, and each element's tolerance: computed the first time
    # the host compares (a device comparison needs neither), then kept.
    @functools.cached_property
    def nan(self) -> np.ndarray | None:
        nan = np.isnan(self.values)
        return nan if nan.any() else None

    @functools.cached_property
    def inf(self) -> np.ndarray | None:
        inf = np.isinf(self.values)
        return inf if inf.any() else None

    @functools.cached_property
    def magnitude(self) -> np.ndarray:
        """Each element's size for its relative tolerance: its own, or FLOOR times the root mean
        square of its row's finite values where that is larger."""
        mag = np.abs(self.values)
        cols = self.shape[-1] if len(self.shape) and self.shape[-1] else max(1, mag.size)
        if mag.size == 0 or mag.size % cols:
            return mag
        rows = mag.reshape(-1, cols)
        with np.errstate(invalid="ignore", over="ignore"):
            finite = np.where(np.isfinite(rows), rows, 0).astype(np.float64)
            rms = np.sqrt(np.mean(finite * finite, axis=1, keepdims=True))
        return np.maximum(rows, (FLOOR * rms).astype(mag.dtype)).reshape(-1)

    @functools.cached_property
    def tol(self) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            tol = (self.atol + self.rtol * self.magnitude).astype(self.values.dtype)
        if self.nan is not None or self.inf is not None:
            special = np.zeros(self.values.shape, dtype=bool)
            for mask in (self.nan, self.inf):
                if mask is not None:
                    special |= mask
            tol[special] = np.inf
        return tol


CHUNK = 1 << 22  # elements compared per task; large outputs are compared on every core


@dataclass
class _Stats:
    nan: int = 0
    first_nan: int = -1
    inf: int = 0
    first_inf: int = -1
    sign: int = 0  # infinities of the wrong sign, or finite where the reference is infinite
    bad: int = 0  # elements outside the tolerance
    worst: float = 0.0
    worst_at: int = 0


def _chunk_stats(out: np.ndarray, exp: Expected, lo: int, hi: int) -> _Stats:
    st = _Stats()
    o = out[lo:hi].astype(exp.values.dtype, copy=False)
    r = exp.values[lo:hi]
    ref_nan = exp.nan[lo:hi] if exp.nan is not None else None
    ref_inf = exp.inf[lo:hi] if exp.inf is not None else None
    o_nan = np.isnan(o)
    bad_nan = o_nan if ref_nan is None else (o_nan & ~ref_nan)
    if bad_nan.any():
        idx = np.flatnonzero(bad_nan)
        st.nan, st.first_nan = idx.size, lo + int(idx[0])
    o_inf = np.isinf(o)
    if o_inf.any() or ref_inf is not None:
        rinf = ref_inf if ref_inf is not None else np.zeros_like(o_inf)
        wrong = o_inf & ~rinf
        if ref_nan is not None:
            wrong &= ~ref_nan
        if wrong.any():
            idx = np.flatnonzero(wrong)
            st.inf, st.first_inf = idx.size, lo + int(idx[0])
        both = o_inf & rinf
        st.sign = int(np.count_nonzero(np.signbit(o[both]) != np.signbit(r[both])))
        st.sign += int(np.count_nonzero(~o_inf & rinf & ~o_nan))
    with np.errstate(invalid="ignore", over="ignore"):
        ratio = np.abs(o - r) / exp.tol[lo:hi]
    if ref_nan is not None or ref_inf is not None or st.nan or st.inf:
        ratio[~np.isfinite(ratio)] = 0.0
    if ratio.size:
        i = int(np.argmax(ratio))
        st.worst, st.worst_at = float(ratio[i]), lo + i
        if st.worst > 1.0:
            st.bad = int(np.count_nonzero(ratio > 1.0))
    return st


def ratios(out: np.ndarray, exp: Expected) -> np.ndarray:
    """Each element's error as a fraction of its tolerance: inf where the output is NaN or
    infinite and the reference is finite, 0 where the reference is not finite (`compare` judges
    those elements)."""
    o = np.ascontiguousarray(out).ravel().astype(exp.values.dtype, copy=False)
    with np.errstate(invalid="ignore", over="ignore"):
        r = (np.abs(o - exp.values) / exp.tol).astype(np.float64)
    r[~np.isfinite(exp.values)] = 0.0
    r[np.isnan(r)] = np.inf
    return r


def _first(values: list[int]) -> int:
    found = [v for v in values if v >= 0]
    return min(found) if found else -1


def compare(name: str, out: np.ndarray, exp: Expected) -> tuple[float, str]:
    """(worst error as a fraction of the tolerance, message); a fraction above 1 fails."""
    if out.shape != exp.shape:
        return math.inf, f"{name}: shape {out.shape} but the reference has {exp.shape}"
    o = np.ascontiguousarray(out).ravel()
    if exp.exact:
        bad = np.flatnonzero(o != exp.values)
        if bad.size:
            i = int(bad[0])
            return math.inf, (f"{name}: {bad.size} of {o.size} elements differ; "
                              f"first at {i}: {o[i]} != {exp.values[i]}")
        return 0.0, ""
    bounds = [(lo, min(lo + CHUNK, o.size)) for lo in range(0, o.size, CHUNK)] or [(0, 0)]
    if len(bounds) > 1:
        stats = list(_pool().map(lambda b: _chunk_stats(o, exp, *b), bounds))
    else:
        stats = [_chunk_stats(o, exp, *bounds[0])]
    nan = sum(s.nan for s in stats)
    if nan:
        return math.inf, (f"{name}: {nan} of {o.size} elements are NaN (unwritten or invalid); "
                          f"first at {_first([s.first_nan for s in stats])}")
    inf = sum(s.inf for s in stats)
    if inf:
        return math.inf, (f"{name}: {inf} elements are Inf where the reference is finite; "
                          f"first at {_first([s.first_inf for s in stats])}")
    if sum(s.sign for s in stats):
        return math.inf, f"{name}: an infinity of the reference is not reproduced"
    top = max(stats, key=lambda s: s.worst)
    if top.worst > 1.0:
        nbad = sum(s.bad for s in stats)
        if nbad <= exp.spare and top.worst <= exp.cap:
            return 1.0, ""  # as few beyond the tolerance, and no further, as the original allows
        i = top.worst_at
        return top.worst, (f"{name}: {nbad} of {o.size} elements outside tolerance (rtol {exp.rtol:g}, "
                           f"atol {exp.atol:g}); worst at {i}: {float(o[i]):.6g} vs {float(exp.values[i]):.6g}")
    return top.worst, ""


_POOL = None


def _pool():
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1), thread_name_prefix="kerntune-compare")
    return _POOL
