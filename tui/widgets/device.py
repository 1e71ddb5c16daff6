"""The device panel: name, compute capability, the limits that bound configurations, telemetry."""

from __future__ import annotations

from typing import Any, Mapping

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from kerntune.engine.device import DeviceLimits, describe
from kerntune.engine.nvml import Telemetry


def limits_of(device: Mapping[str, Any]) -> DeviceLimits | None:
    """The session's [device] table as DeviceLimits; None when it is missing or malformed."""
    if not isinstance(device.get("name"), str) or not isinstance(device.get("backend"), str):
        return None
    try:
        return DeviceLimits.from_dict(device)
    except (TypeError, ValueError):
        return None


def telemetry_rows(t: Telemetry) -> list[tuple[str, Text]]:
    """Label/value rows for one NVML reading, warnings in colour and in words."""
    power = Text(f"{t.power_w:.0f} W of {t.power_limit_w:.0f} W")
    if t.power_limit_w and t.power_w >= 0.95 * t.power_limit_w:
        power.append(" (at the limit)", "yellow")
    temp = Text(f"{t.temperature_c} °C")
    if t.slowdown_temp_c:
        temp.append(f" (slows at {t.slowdown_temp_c} °C)", "dim")
        if t.temperature_c >= t.slowdown_temp_c - 5:
            temp.stylize("bold yellow")
    reasons = [r for r in t.throttle_reasons if r != "idle"]
    throttle = Text(", ".join(reasons) if reasons else "none", "bold yellow" if reasons else "green")
    rows = [
        ("SM clock", Text(f"{t.sm_clock_mhz} MHz")),
        ("memory clock", Text(f"{t.mem_clock_mhz} MHz")),
        ("power", power),
        ("temperature", temp),
        ("throttling", throttle),
        ("utilisation", Text(f"{t.utilization_pct}%")),
    ]
    if t.memory_total:
        rows.append(("memory used", Text(f"{t.memory_used / 2**30:.1f} / {t.memory_total / 2**30:.1f} GiB")))
    if t.pcie_gen:
        rows.append(("PCIe link", Text(f"gen {t.pcie_gen} x{t.pcie_width}")))
    return rows


def device_renderable(device: Mapping[str, Any], telemetry: Telemetry | None, note: str):
    """The panel's contents: the device's name, its telemetry (or why there is none), its limits."""
    limits = limits_of(device)
    if limits is None:
        return Text("waiting for the run to open its device", style="dim")
    head = Text(limits.name, style="bold")
    sub = [limits.backend]
    if limits.compute_capability:
        sub.append(f"compute capability {limits.compute_capability}")
    if limits.driver:
        sub.append(limits.driver)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")
    if telemetry is not None:
        for label, value in telemetry_rows(telemetry):
            grid.add_row(label, value)
    for label, value in describe(limits):
        if label in ("backend", "name", "driver", "compute capability"):
            continue
        grid.add_row(label, value)
    parts = [head, Text(" · ".join(sub), style="dim")]
    if telemetry is None and note:
        parts.append(Text(note, style="italic"))  # why there is no telemetry, in one line
    return Group(*parts, grid)


class DevicePanel(VerticalScroll):
    """The device and, while a live run goes on, its NVML telemetry about once a second."""

    def compose(self):
        yield Static(id="device-body")

    def show(self, device: Mapping[str, Any], telemetry: Telemetry | None, note: str) -> None:
        self.query_one("#device-body", Static).update(device_renderable(device, telemetry, note))
