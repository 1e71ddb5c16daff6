"""NVML identity and telemetry through pynvml (the module the nvidia-ml-py distribution provides).

Without the library or a driver every function says so in one line and nothing else breaks.
"""

from __future__ import annotations

from dataclasses import dataclass

# Clock event ("throttle") reason bits, as nvml.h defines them.
REASONS = {
    0x1: "idle",
    0x2: "application clocks",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal",
    0x40: "hardware thermal",
    0x80: "power brake",
    0x100: "display clocks",
}


class NVMLUnavailable(RuntimeError):
    """NVML cannot be used here (no library, no driver, no device)."""


@dataclass(frozen=True)
class Identity:
    index: int
    name: str
    uuid: str
    driver: str
    memory_total: int
    max_sm_clock_mhz: int
    max_mem_clock_mhz: int
    power_limit_w: float
    slowdown_temp_c: int
    pcie_max_gen: int
    pcie_max_width: int


@dataclass(frozen=True)
class Telemetry:
    sm_clock_mhz: int
    mem_clock_mhz: int
    power_w: float
    power_limit_w: float
    temperature_c: int
    slowdown_temp_c: int
    memory_used: int
    memory_total: int
    utilization_pct: int
    throttle_reasons: tuple[str, ...]
    pcie_gen: int
    pcie_width: int


_initialised = False


def _nvml():
    global _initialised
    try:
        import pynvml
    except ImportError:
        raise NVMLUnavailable("NVML: the nvidia-ml-py package is not installed") from None
    if not _initialised:
        try:
            pynvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            raise NVMLUnavailable(f"NVML: not available here ({_text(e)})") from None
        _initialised = True
    return pynvml


def _text(e: BaseException) -> str:
    return str(e).strip() or type(e).__name__


def _try(fn, *args, default=0):
    try:
        return fn(*args)
    except Exception:
        return default


def device_count() -> int:
    nv = _nvml()
    return int(_try(nv.nvmlDeviceGetCount))


def _handle(index: int):
    nv = _nvml()
    try:
        return nv, nv.nvmlDeviceGetHandleByIndex(index)
    except Exception as e:
        raise NVMLUnavailable(f"NVML: no device {index} ({_text(e)})") from None


def identity(index: int = 0) -> Identity:
    nv, h = _handle(index)
    name = _try(nv.nvmlDeviceGetName, h, default="")
    uuid = _try(nv.nvmlDeviceGetUUID, h, default="")
    mem = _try(nv.nvmlDeviceGetMemoryInfo, h, default=None)
    return Identity(
        index=index,
        name=name.decode() if isinstance(name, bytes) else str(name),
        uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
        driver=str(_try(nv.nvmlSystemGetDriverVersion, default="")),
        memory_total=int(mem.total) if mem is not None else 0,
        max_sm_clock_mhz=int(_try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM)),
        max_mem_clock_mhz=int(_try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM)),
        power_limit_w=_try(nv.nvmlDeviceGetEnforcedPowerLimit, h) / 1000.0,
        slowdown_temp_c=int(_try(nv.nvmlDeviceGetTemperatureThreshold, h,
                                 nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)),
        pcie_max_gen=int(_try(nv.nvmlDeviceGetMaxPcieLinkGeneration, h)),
        pcie_max_width=int(_try(nv.nvmlDeviceGetMaxPcieLinkWidth, h)),
    )


def telemetry(index: int = 0) -> Telemetry:
    """One reading of clocks, power, temperature, memory, utilisation and throttle reasons."""
    nv, h = _handle(index)
    reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nv, "nvmlDeviceGetCurrentClocksThrottleReasons")
    bits = int(_try(reasons_fn, h))
    mem = _try(nv.nvmlDeviceGetMemoryInfo, h, default=None)
    util = _try(nv.nvmlDeviceGetUtilizationRates, h, default=None)
    return Telemetry(
        sm_clock_mhz=int(_try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)),
        mem_clock_mhz=int(_try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)),
        power_w=_try(nv.nvmlDeviceGetPowerUsage, h) / 1000.0,
        power_limit_w=_try(nv.nvmlDeviceGetEnforcedPowerLimit, h) / 1000.0,
        temperature_c=int(_try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)),
        slowdown_temp_c=int(_try(nv.nvmlDeviceGetTemperatureThreshold, h,
                                 nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)),
        memory_used=int(mem.used) if mem is not None else 0,
        memory_total=int(mem.total) if mem is not None else 0,
        utilization_pct=int(util.gpu) if util is not None else 0,
        throttle_reasons=reasons(bits),
        pcie_gen=int(_try(nv.nvmlDeviceGetCurrPcieLinkGeneration, h)),
        pcie_width=int(_try(nv.nvmlDeviceGetCurrPcieLinkWidth, h)),
    )


@dataclass(frozen=True)
class Quick:
    """What a measurement watch reads every tenth of a second: the SM clock, the clock event
    reasons, and the processes with a context on the device (None when NVML cannot list them)."""

    sm_clock_mhz: int
    reasons: tuple[str, ...]
    pids: tuple[int, ...] | None


def telemetry_reader(index: int = 0):
    """A function that reads `Quick` of device `index` (NVMLUnavailable here when it cannot)."""
    nv, h = _handle(index)
    reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nv, "nvmlDeviceGetCurrentClocksThrottleReasons")
    procs_fn = getattr(nv, "nvmlDeviceGetComputeRunningProcesses", None)

    def read() -> Quick:
        procs = _try(procs_fn, h, default=None) if procs_fn is not None else None
        return Quick(sm_clock_mhz=int(_try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)),
                     reasons=reasons(int(_try(reasons_fn, h))),
                     pids=tuple(int(p.pid) for p in procs) if procs is not None else None)

    return read


def energy_reader(index: int = 0, pci_bus_id: str = ""):
    """A function that reads device `index`'s total energy counter, in joules since the driver
    loaded (NVML's nvmlDeviceGetTotalEnergyConsumption: Volta and later). Read only: kerntune
    never changes clocks or power limits. NVMLUnavailable, in one line, where there is no counter."""
    nv = _nvml()
    h = None
    if pci_bus_id:  # the device the worker opened, whatever order NVML counts devices in
        h = _try(nv.nvmlDeviceGetHandleByPciBusId, pci_bus_id.encode() if isinstance(pci_bus_id, str) else pci_bus_id,
                 default=None)
    if h is None:
        nv, h = _handle(index)
    read_fn = getattr(nv, "nvmlDeviceGetTotalEnergyConsumption", None)
    if read_fn is None:
        raise NVMLUnavailable("NVML: this nvidia-ml-py has no total-energy counter")
    try:
        read_fn(h)
    except Exception as e:
        raise NVMLUnavailable(f"NVML: device {index} has no total-energy counter ({_text(e)})") from None

    def read() -> float:
        return read_fn(h) / 1000.0  # millijoules

    return read


def reasons(bits: int) -> tuple[str, ...]:
    """Names of the clock event reasons set in an NVML bit mask."""
    return tuple(name for bit, name in REASONS.items() if bits & bit)


def describe_all() -> list[str]:
    """Lines for `kerntune devices`: every NVML device's identity and a telemetry reading."""
    try:
        n = device_count()
    except NVMLUnavailable as e:
        return [str(e)]
    if n == 0:
        return ["NVML: no NVIDIA devices"]
    lines = []
    for i in range(n):
        try:
            ident, tel = identity(i), telemetry(i)
        except NVMLUnavailable as e:
            lines.append(str(e))
            continue
        lines += [
            f"nvml device {i}: {ident.name}",
            f"    {'uuid':<22} {ident.uuid}",
            f"    {'driver':<22} {ident.driver}",
            f"    {'memory':<22} {tel.memory_used / 2**30:.1f} / {ident.memory_total / 2**30:.1f} GiB used",
            f"    {'SM clock':<22} {tel.sm_clock_mhz} MHz (max {ident.max_sm_clock_mhz})",
            f"    {'memory clock':<22} {tel.mem_clock_mhz} MHz (max {ident.max_mem_clock_mhz})",
            f"    {'power':<22} {tel.power_w:.0f} W of {tel.power_limit_w:.0f} W",
            f"    {'temperature':<22} {tel.temperature_c} C (slowdown at {tel.slowdown_temp_c} C)",
            f"    {'throttle reasons':<22} {', '.join(tel.throttle_reasons) or 'none'}",
            f"    {'PCIe link':<22} gen {tel.pcie_gen} x{tel.pcie_width} (max gen {ident.pcie_max_gen} "
            f"x{ident.pcie_max_width})",
        ]
    return lines
