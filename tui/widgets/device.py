"""The device panel: name, compute capability, the limits that bound configurations, telemetry.

In a run over several devices it also has a table of them: what each has measured, its pace,
its failures and its fastest, and each local GPU's NVML reading. A cluster's devices are on
other hosts, where this dashboard reads no NVML: the panel shows their progress and says so.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence, Union

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from kerntune.engine.certificate import certificate_line
from kerntune.engine.certificate import checked as checked_certificate
from kerntune.engine.device import DeviceLimits, describe
from kerntune.engine.nvml import Telemetry

from ..numbers import fmt_us
from ..state import DashboardState
from ..terminal import printable
from .progress import fmt_rate

# What the panel knows of one local device's telemetry: a reading, or why there is none.
Reading = Union[Telemetry, str]
REMOTE_NOTE = "a cluster's devices are on other hosts: no NVML telemetry of them here, progress only"


def limits_of(device: Mapping[str, Any]) -> DeviceLimits | None:
    """The session's [device] table as DeviceLimits; None when it is missing or malformed."""
    if not isinstance(device.get("name"), str) or not isinstance(device.get("backend"), str):
        return None
    try:
        return DeviceLimits.from_dict(device)
    except (TypeError, ValueError):
        return None


def _at_power_limit(t: Telemetry) -> bool:
    return bool(t.power_limit_w) and t.power_w >= 0.95 * t.power_limit_w


def _near_slowdown(t: Telemetry) -> bool:
    return bool(t.slowdown_temp_c) and t.temperature_c >= t.slowdown_temp_c - 5


def _throttling(t: Telemetry) -> Text:
    reasons = [r for r in t.throttle_reasons if r != "idle"]
    return Text(", ".join(reasons) if reasons else "none", "bold yellow" if reasons else "green")


def telemetry_rows(t: Telemetry) -> list[tuple[str, Text]]:
    """Label/value rows for one NVML reading, warnings in colour and in words."""
    power = Text(f"{t.power_w:.0f} W of {t.power_limit_w:.0f} W")
    if _at_power_limit(t):
        power.append(" (at the limit)", "yellow")
    temp = Text(f"{t.temperature_c} °C")
    if t.slowdown_temp_c:
        temp.append(f" (slows at {t.slowdown_temp_c} °C)", "dim")
        if _near_slowdown(t):
            temp.stylize("bold yellow")
    throttle = _throttling(t)
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


class DeviceRows:
    """Figures under a bold header line, one row per device. The devices' names make the first
    column when they fit beside the figures (`cuda:0`); where they do not (a cluster's
    `host:port/cuda:0` in a narrow panel), each name has a line of its own above its figures."""

    def __init__(self, headers: Sequence[str], rows: Sequence[tuple[Text, Sequence[Text]]]):
        self.headers = list(headers)
        self.rows = list(rows)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        heads = [Text(h, "bold") for h in self.headers]
        widths = [max([heads[i + 1].cell_len] + [cells[i].cell_len for _, cells in self.rows])
                  for i in range(len(heads) - 1)]
        name = max([heads[0].cell_len] + [label.cell_len for label, _ in self.rows])
        # two spaces between columns where they fit, else one; else the names go above
        gap = next((g for g in (2, 1) if name + sum(w + g for w in widths) <= options.max_width), 0)
        beside = gap > 0
        gap = gap or 1
        indent = name if beside else 2

        def line(first: Text, cells: Sequence[Text]) -> Text:
            out = Text(no_wrap=True, overflow="ellipsis")
            if beside:
                out.append_text(first)
            out.append(" " * (indent - (first.cell_len if beside else 0)))
            for w, cell in zip(widths, cells):
                out.append(" " * (gap + w - cell.cell_len))
                out.append_text(cell)
            return out

        yield line(heads[0], heads[1:])
        for label, cells in self.rows:
            if not beside:
                yield label
            yield line(label, cells)


def progress_rows(state: DashboardState) -> DeviceRows:
    """One row per device: the configurations it measured, its rate in the current run, how many
    failed, and its fastest; the device that holds the session's best in bold."""
    best = state.best
    rows = []
    for d in state.device_list():
        mine = state.device_best(d)
        rate = state.device_rate(d)
        holds_best = "bold" if mine is not None and mine is best else ""
        rows.append((Text(printable(d.label), holds_best), [
            Text(str(d.results)), Text(fmt_rate(rate) if rate else "-"), Text(str(d.failed), "red" if d.failed else ""),
            Text(fmt_us(mine.median_us) if mine is not None else "-", holds_best)]))
    return DeviceRows(("device", "results", "rate", "failed", "best µs"), rows)


def readings_renderable(readings: Mapping[str, Reading]) -> Group:
    """One row per local device: its NVML reading, warnings in colour; then which devices
    throttle and why, and which NVML could not read."""
    rows, throttled, unread = [], [], []
    for label, t in readings.items():
        if isinstance(t, str):
            unread.append(Text(printable(f"{label}: {t}"), "italic"))
            continue
        rows.append((Text(printable(label)), [Text(f"{t.sm_clock_mhz} MHz"),
                                   Text(f"{t.power_w:.0f} W", "yellow" if _at_power_limit(t) else ""),
                                   Text(f"{t.temperature_c} °C", "bold yellow" if _near_slowdown(t) else ""),
                                   Text(f"{t.utilization_pct}%")]))
        throttle = _throttling(t)
        if throttle.plain != "none":
            throttled.append(Text.assemble(f"{printable(label)} throttling: ", throttle))
    if not rows:
        return Group(*unread)
    if not throttled:
        throttled.append(Text.assemble("throttling: ", Text("none", "green")))
    return Group(DeviceRows(("NVML", "SM clock", "power", "temp", "util"), rows), *throttled, *unread)


def selftest_text(cert: Any) -> Text:
    """The header's selftest certificate in words: green when everything was caught and every
    tie found, red when not."""
    checked = checked_certificate(cert)
    if checked is None:
        return Text("a record that does not read as a selftest's", "dim")
    whole = checked["caught"] == checked["hostile"] and checked["ties"] == checked["twins"]
    return Text(printable(certificate_line(checked)), "green" if whole else "bold red")


def _shows_devices(state: DashboardState | None, readings: Mapping[str, Reading]) -> bool:
    """Whether the panel shows a table of devices: results from several, or several read."""
    return len(readings) > 1 or (state is not None and state.several_devices)


def device_renderable(device: Mapping[str, Any], telemetry: Telemetry | None, note: str,
                      state: DashboardState | None = None, readings: Mapping[str, Reading] | None = None):
    """The panel's contents: the device's name, its telemetry (or why there is none), its limits;
    in a run over several devices, a table of them and of their telemetry instead of one reading."""
    readings = readings or {}
    limits = limits_of(device)
    if limits is None:
        return Text("waiting for the run to open its device", style="dim")
    head = Text(printable(limits.name), style="bold")  # a session's header: printable, never markup
    sub = [limits.backend]
    if limits.compute_capability:
        sub.append(f"compute capability {limits.compute_capability}")
    if limits.driver:
        sub.append(limits.driver)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")
    several = _shows_devices(state, readings)
    if telemetry is not None and not several:
        for label, value in telemetry_rows(telemetry):
            grid.add_row(label, value)
    for label, value in describe(limits):
        if label in ("backend", "name", "driver", "compute capability"):
            continue
        grid.add_row(label, Text(printable(value)))
    if "selftest" in device:  # `kerntune selftest` was run on this device and driver
        grid.add_row("selftest", selftest_text(device.get("selftest")))
    parts: list = [head, Text(printable(" · ".join(sub)), style="dim")]
    if several:
        if state is not None and state.devices:
            parts.append(progress_rows(state))
        if readings:
            parts.append(readings_renderable(readings))
        if state is not None and any(d.remote for d in state.devices.values()):
            parts.append(Text(REMOTE_NOTE, style="italic"))
        elif not readings and note:
            parts.append(Text(printable(note), style="italic"))
    elif telemetry is None and note:
        parts.append(Text(printable(note), style="italic"))  # why there is no telemetry, in one line
    return Group(*parts, grid)


class DevicePanel(VerticalScroll):
    """The device and, while a live run goes on, its NVML telemetry about once a second."""

    def compose(self):
        yield Static(id="device-body")

    def show(self, device: Mapping[str, Any], telemetry: Telemetry | None, note: str,
             state: DashboardState | None = None, readings: Mapping[str, Reading] | None = None) -> None:
        self.query_one("#device-body", Static).update(device_renderable(device, telemetry, note, state, readings))
