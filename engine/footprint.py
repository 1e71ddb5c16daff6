"""The memory a problem needs, known before anything is allocated.

A run holds every buffer argument on the device, plus a pristine copy of each input for every input
set in its pool (copied into the working buffers before each checked run); the host holds the
pool's inputs, their reference outputs (in the working precision with a tolerance for each element)
and a copy of each output read back. That is for the problem tuned and for every verification size.
`check_fits` refuses, in one line with the figures, a problem the device or the host cannot hold,
before a worker allocates anything: a problem of 10^9 elements is refused at once instead of
minutes into allocating.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from .device import DeviceLimits
from .expressions import ExpressionError
from .template import DTYPES, FLOAT_DTYPES, Problem, Template, TemplateError


@dataclass(frozen=True)
class Footprint:
    """Bytes a run needs at the least: on the device and on the host."""

    device_bytes: int
    host_bytes: int


def _elements(template: Template, problem: Problem) -> dict[str, int]:
    """Elements of every buffer argument at a problem size; TemplateError when a shape cannot be
    evaluated (not whole, negative, not finite)."""
    out = {}
    for a in template.arguments:
        if not a.is_buffer:
            continue
        n = 1
        for e in a.shape:
            try:
                v = e.evaluate(problem.values)
            except ExpressionError as err:
                raise TemplateError(f"{template.spec_path}: [arg.{a.name}.shape] at {problem.label()}: {err}") from None
            if isinstance(v, float):
                if not v.is_integer():
                    raise TemplateError(f"{template.spec_path}: [arg.{a.name}.shape] at {problem.label()}: "
                                        f"`{e.source}` is {v}, not a whole number")
                v = int(v)
            if v < 0:
                raise TemplateError(f"{template.spec_path}: [arg.{a.name}.shape] at {problem.label()}: "
                                    f"`{e.source}` is negative ({v})")
            n *= int(v)
        out[a.name] = n
    return out


def footprint(template: Template, problem: Problem, pool: int) -> Footprint:
    """The bytes a run at `problem` needs, with `pool` input sets for each size checked."""
    device = host = 0
    for p in (problem, *template.verify_problems):
        elements = _elements(template, p)
        for a in template.arguments:
            if not a.is_buffer:
                continue
            nbytes = elements[a.name] * DTYPES[a.dtype]
            device += nbytes  # the working buffer
            if a.role in ("input", "inout"):
                device += pool * nbytes  # a pristine copy per input set
                host += pool * nbytes
            if a.is_output:
                work = 8 if a.dtype == "float64" else 4
                per_element = 2 * work if a.dtype in FLOAT_DTYPES else DTYPES[a.dtype]
                host += pool * elements[a.name] * per_element + nbytes  # references, and the read-back copy
    return Footprint(device, host)


def check_values(template: Template, problem: Problem, ranges: bool = True) -> None:
    """The problem's scalar arguments and cost model evaluate to finite numbers (one line if not)."""
    exprs = [(f"arg.{a.name}.value", a.value, a.dtype) for a in template.arguments if a.value is not None]
    exprs += [("cost.bytes", template.cost_bytes, ""), ("cost.flops", template.cost_flops, "")]
    for key, e, dtype in exprs:
        try:
            v = e.evaluate(problem.values)
        except ExpressionError as err:
            raise TemplateError(f"{template.spec_path}: [{key}] at {problem.label()}: {err}") from None
        if ranges and dtype in INT_RANGES and not (INT_RANGES[dtype][0] <= v <= INT_RANGES[dtype][1] and float(v).is_integer()):
            raise TemplateError(f"{template.spec_path}: [{key}] at {problem.label()}: `{e.source}` is {v}, "
                                f"not a {dtype} value")


# the values an integer scalar argument can take, by dtype
INT_RANGES = {f"{sign}int{bits}": ((0, 2**bits - 1) if sign else (-2**(bits - 1), 2**(bits - 1) - 1))
              for sign in ("", "u") for bits in (8, 16, 32, 64)}


def available_host_bytes() -> int | None:
    """Memory the host can still give (MemAvailable), or None when it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(template: Template, problem: Problem, limits: DeviceLimits, pool: int,
               host_available: int | None = None) -> Footprint:
    """The problem's footprint; TemplateError, one line with the figures, when the device's
    global memory or the host's available memory cannot hold it."""
    check_values(template, problem, ranges=False)  # (memory first: a size far too large says so)
    need = footprint(template, problem, pool)
    where = f"{template.name} at {problem.label()}"
    if limits.global_mem_bytes and need.device_bytes > limits.global_mem_bytes:
        raise TemplateError(f"{where} needs at least {fmt_bytes(need.device_bytes)} of device memory "
                            f"(its buffers and {pool} input sets); {limits.name} has "
                            f"{fmt_bytes(limits.global_mem_bytes)}")
    host = available_host_bytes() if host_available is None else host_available
    if host is not None and need.host_bytes > host:
        raise TemplateError(f"{where} needs at least {fmt_bytes(need.host_bytes)} of host memory "
                            f"({pool} input sets with their references); {fmt_bytes(host)} is available")
    check_values(template, problem)  # a scalar that its dtype cannot hold
    return need


def fmt_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n, 1024)), 6)
    value = n / 1024**exp
    unit = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")[exp]
    return f"{value:.1f} {unit}" if value < 1e6 else f"{n:.3g} B"
