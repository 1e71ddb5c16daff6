"""The dashboard: one Textual app for a live run and for the replay of a session.

It renders engine events and does not care where they come from. A live run's engine runs in a
Textual thread worker and only puts events on a queue (tui/feeds.py); a replay releases a
session's events as its clock passes their timestamps. Either way a timer drains what is due,
folds it into the DashboardState, and repaints the panels that changed, in one batch per frame.
"""

from __future__ import annotations

import io
import time
from multiprocessing import resource_tracker
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence

from rich.console import Console
from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Container
from textual.screen import Screen
from textual.filter import LineFilter, Monochrome, NoColor
from textual.widgets import DataTable, Footer, Input
from textual.worker import Worker, WorkerState

from kerntune.engine.contrast import contrast_lines
from kerntune.engine.nvml import NVMLUnavailable, Telemetry
from kerntune.engine.session import Session, default_path, file_stem

from .export import ExportError, best_header, best_json, config_source, save_copy, source_name, write_file
from .feeds import Batch, LiveFeed, ReplayFeed, speed_label
from .messages import RunEnded, TelemetryRead
from .state import DashboardState, contrast_of
from .terminal import printable
from .widgets.details import DetailsScreen
from .widgets.device import REMOTE_NOTE, DevicePanel, Reading
from .widgets.diff import DiffPanel, diff_counts
from .widgets.help import HelpScreen
from .widgets.lines import LinesScreen
from .words import fmt_config, front_lines
from .widgets.leaderboard import Leaderboard, column_label
from .widgets.plan import PlanPanel
from .widgets.progress import ProgressPanel
from .widgets.prompt import PathPrompt
from .widgets.source import SourceScreen
from .widgets.titlebar import TitleBar

# Frames: the queue is drained this often. 50 ms keeps the screen fluid and a burst of events
# costs one repaint per frame, whatever the rate.
TICK = 0.05
# At least this big, the screen shows every panel at once; smaller, one side panel at a time.
WIDE = (110, 30)
PANELS = ("board", "device", "plan", "diff")
PANEL_NAMES = {"board": "Leaderboard", "device": "Device", "plan": "Plan", "diff": "Template diff"}


class RunControl(Protocol):
    """What the dashboard asks of a live run (TuneRun provides it)."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def stop(self, reason: str = "stopped") -> None: ...

    @property
    def paused(self) -> bool: ...


@dataclass(frozen=True)
class Action:
    """One thing the user can do: its keys, its action, its words, and the modes it applies in."""

    keys: str  # Textual key names, comma-separated
    action: str
    description: str
    group: str
    modes: tuple[str, ...] = ("live", "replay")
    footer: str = ""  # the footer's short label; empty keeps it off the footer
    shown_keys: str = ""  # the keys as the help screen writes them
    footer_modes: tuple[str, ...] = ("live", "replay")  # 80 columns hold about seven labels


# The one table of actions: bindings, the help screen and the command palette all come from it.
ACTIONS: tuple[Action, ...] = (
    Action("space", "toggle_pause", "Pause or resume the run (after the current configuration)", "Run",
           ("live",), "Pause"),
    Action("s", "stop", "Stop the run (press twice); the session keeps everything so far", "Run", ("live",),
           "Stop"),
    Action("space", "toggle_play", "Play or pause the replay", "Replay", ("replay",), "Play", "space"),
    Action("plus,equals_sign", "faster", "Replay faster (1x … max)", "Replay", ("replay",), "Faster", "+"),
    Action("minus", "slower", "Replay slower", "Replay", ("replay",), "Slower", "-"),
    Action("n,full_stop", "step", "Step one event (pauses)", "Replay", ("replay",), "Step", "n ."),
    Action("greater_than_sign", "to_end", "Jump to the end", "Replay", ("replay",), "End", ">"),
    Action("less_than_sign", "restart", "Restart the replay from the first event", "Replay", ("replay",), "",
           "<"),
    Action("f", "toggle_failed", "Show or hide failed configurations and their messages", "Leaderboard",
           footer="Failed", footer_modes=("live",)),
    Action("slash", "filter", "Filter: BLOCK=256  VEC>=4  sol>50  status=wrong_result  or any word",
           "Leaderboard", footer="Filter", shown_keys="/", footer_modes=("live",)),
    Action("o", "next_sort", "Sort by the next column", "Leaderboard"),
    Action("r", "reverse_sort", "Reverse the sort", "Leaderboard"),
    Action("enter", "details", "Details of the selected configuration: its whole configuration, raw times, "
           "resources, errors and the compiler's log", "Leaderboard"),
    Action("v", "view_source", "The selected configuration's source (s in it saves it as a file)", "Leaderboard",
           footer="Source", footer_modes=()),
    Action("m", "mark", "Mark the selected configuration to compare it (two at most; m again unmarks it)",
           "Leaderboard"),
    Action("c", "compare", "Compare the two marked configurations: parameters, time and interval, resources, "
           "occupancy, profiler metrics", "Leaderboard"),
    Action("p", "pareto", "Time against energy: the Pareto front (tune with --objective energy or edp)",
           "Leaderboard"),
    Action("tab", "next_panel", "Next panel", "Panels", shown_keys="tab"),
    Action("shift+tab", "previous_panel", "Previous panel", "Panels"),
    Action("1", "panel('board')", "Leaderboard", "Panels"),
    Action("2", "panel('device')", "Device and telemetry", "Panels"),
    Action("3", "panel('plan')", "Plan and notes", "Panels"),
    Action("4", "panel('diff')", "Template diff", "Panels"),
    Action("d", "toggle_diff", "Diff: unified or side by side", "Panels", footer="Diff", footer_modes=("live",)),
    Action("ctrl+s", "save", "Save a copy of the session to a path", "Files", shown_keys="ctrl+s"),
    Action("e", "export_header", "Export the best configuration as a header (self-contained on CUDA)", "Files"),
    Action("j", "export_json", "Export the best configuration as JSON", "Files"),
    Action("question_mark,f1", "help", "Show the keys", "App", footer="Help", shown_keys="? f1"),
    Action("ctrl+p", "command_palette", "Every action by name (the command palette)", "App",
           shown_keys="ctrl+p"),
    Action("q", "quit", "Quit (a live run is stopped first; the session is kept)", "App", footer="Quit"),
)


def bindings_for(mode: str) -> list[Binding]:
    """The key bindings of one mode, from the table of actions."""
    out = []
    for a in ACTIONS:
        if mode not in a.modes or a.action == "command_palette":
            continue
        shown = bool(a.footer) and mode in a.footer_modes
        # Tab would otherwise be the screen's own focus_next, which cannot show a hidden panel.
        priority = a.action in ("next_panel", "previous_panel")
        out.append(Binding(a.keys, a.action, a.footer or a.description, show=shown, priority=priority))
    return out


def _first_key(keys: str) -> str:
    names = {"space": "space", "slash": "/", "question_mark": "?", "plus": "+", "minus": "-",
             "full_stop": ".", "greater_than_sign": ">", "less_than_sign": "<", "equals_sign": "="}
    return " ".join(names.get(k, k) for k in keys.split(","))


class Dashboard(App[int]):
    """The kerntune dashboard: device, plan, template diff, leaderboard and progress, live or replayed.

    LiveDashboard and ReplayDashboard differ only in their keys; everything else is shared.
    """

    CSS_PATH = Path(__file__).with_name("dashboard.tcss")  # absolute: subclasses live elsewhere
    TITLE = "kerntune"
    mode = ""

    def __init__(self, *, feed: LiveFeed | ReplayFeed, state: DashboardState | None = None,
                 run: RunControl | None = None, engine: Callable[[], Any] | None = None,
                 session_path: Path | None = None, nvml_index: int | None = None,
                 telemetry: Callable[[int], Telemetry] | None = None, tick: float = TICK,
                 warnings: Iterable[str] = (), devices: Sequence[int] = (), cluster: bool = False) -> None:
        super().__init__()
        self.feed = feed
        self.state = state or DashboardState()
        self.run_control = run
        self.engine = engine  # blocking; runs in a thread worker (TuneRun.run)
        self.session_path = session_path
        self.nvml_index = nvml_index
        # A run over several devices of this host: NVML reads each (more join as results name them).
        self.devices = tuple(devices)
        self.cluster = cluster  # its devices are on other hosts: nothing here to read
        self.read_telemetry = telemetry
        self.tick = tick
        self.load_warnings = list(warnings)
        self.side = "device"  # the side panel shown when there is room for one only
        self.telemetry: Telemetry | None = None  # the first device's reading
        self.telemetry_note = ""
        self.readings: dict[int, Telemetry] = {}  # by NVML index, every device read
        self.reading_errors: dict[int, str] = {}  # devices NVML could not read, and why
        self.run_error: BaseException | None = None
        self.outcome: Any = None
        self.engine_done = engine is None
        self._quit_when_done = False
        self._stop_armed = False
        self._stopping = False
        self._marked: list[str] = []  # rows marked for a comparison (`m`), two at most
        self._telemetry_timer = None
        self._telemetry_started = False
        self._last_status: Text | None = None
        # (time the oldest item of a batch became available, items, time its frame was painted)
        self.frames: list[tuple[float, int, float]] = []
        self.record_frames = False

    # layout ------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield TitleBar(id="title")
        yield ProgressPanel(id="progress")
        with Container(id="main"):
            board = Leaderboard(self.state, id="board", classes="panel")
            board.border_title = "Leaderboard"
            yield board
            device = DevicePanel(id="device", classes="panel side -current")
            device.border_title = "Device [2]"
            yield device
            plan = PlanPanel(self.state, id="plan")
            plan.add_class("panel", "side")
            plan.border_title = "Plan [3]"
            yield plan
            diff = DiffPanel(id="diff", classes="panel side")
            diff.border_title = "Template diff [4]"
            yield diff
        yield Footer()

    def get_line_filters(self):
        """With NO_COLOR, no colour at all (Textual's own choice there is greyscale): the terminal's
        own foreground and background, with bold, dim and reverse (the cursor row) kept."""
        filters = super().get_line_filters()
        if not self.no_color:
            return filters
        if not hasattr(self, "_no_color_filter"):
            self._no_color_filter: LineFilter = NoColor()
        return [self._no_color_filter if isinstance(f, Monochrome) else f for f in filters]

    def on_mount(self) -> None:
        self._layout_for(self.size.width, self.size.height)
        self.query_one("#board-table", DataTable).focus()
        if self.mode == "replay":
            self.telemetry_note = "NVML telemetry: live runs only"
        for w in self.load_warnings:
            self.state.warn(w)
        self._sync()
        self.set_interval(self.tick, self._drain, name="drain")
        if self.engine is not None:
            self._run_engine()

    def on_resize(self, event) -> None:
        self._layout_for(event.size.width, event.size.height)

    def _layout_for(self, width: int, height: int) -> None:
        wide = width >= WIDE[0] and height >= WIDE[1]
        self.set_class(wide, "-wide")
        self.set_class(not wide, "-compact")
        if self.is_mounted:
            self.call_after_refresh(self._refit_board)

    def _refit_board(self) -> None:
        # The leaderboard picks its columns for its width, known only after layout.
        self.query_one(Leaderboard).show()

    @property
    def wide(self) -> bool:
        return self.has_class("-wide")

    # the frame ---------------------------------------------------------------------------------
    def _drain(self) -> None:
        batch = self.feed.poll()
        self._apply(batch)

    def _apply(self, batch: Batch) -> None:
        if batch.items:
            self.state.apply_all(batch.items)
            if not self._telemetry_started and self.state.started is not None and self.mode == "live":
                self._start_telemetry()
            elif self._telemetry_started and self.telemetry_note != REMOTE_NOTE and self._remote():
                self._from_a_cluster()
        self._sync()
        if batch.items and self.record_frames:
            since, n = batch.since, len(batch.items)
            self.call_after_refresh(lambda: self.frames.append((since, n, _now())))

    def _sync(self) -> None:
        """Repaint what the events since the last frame changed, as one batch."""
        state = self.state
        dirty = set(state.dirty)
        state.dirty.clear()
        with self.batch_update():
            if "board" in dirty:
                self.query_one(Leaderboard).show()
            if "progress" in dirty:
                self.query_one(ProgressPanel).show(state)
            if "plan" in dirty:
                self.query_one(PlanPanel).show()
            if "device" in dirty:
                self._show_device()
            if "diff" in dirty:
                self._show_diff()
            self.refresh_title()

    def refresh_title(self) -> None:
        status = self._status()
        if status != self._last_status:
            self._last_status = status
            self.query_one(TitleBar).show(self.state, status)

    def _status(self) -> Text:
        state = self.state
        if self.mode == "replay":
            feed = self.feed
            assert isinstance(feed, ReplayFeed)
            where = f"{feed.position}/{feed.total} events · t {feed.session_t:.1f} s"
            if feed.done:
                return Text.assemble(("■ replay ended", "bold"), f" · {where}")
            if feed.playing:
                return Text.assemble(("▶ replay", "bold green"), f" {speed_label(feed.speed)} · {where}")
            return Text.assemble(("❚❚ replay paused", "bold yellow"), f" {speed_label(feed.speed)} · {where}")
        if state.error is not None or self.run_error is not None:
            return Text("✖ run failed", style="bold red")
        if state.finished is not None:
            return Text("■ finished", style="bold")
        if self._quit_when_done or self._stopping:
            return Text("■ stopping…", style="bold yellow")
        if self.run_control is not None and self.run_control.paused:
            return Text("❚❚ paused", style="bold yellow")
        if state.started is None:
            return Text("○ starting", style="dim")
        return Text("● tuning", style="bold green")

    def _show_device(self) -> None:
        self.query_one(DevicePanel).show(self.state.device, self.telemetry, self.telemetry_note, self.state,
                                         self._panel_readings())

    def _panel_readings(self) -> dict[str, Reading]:
        """Each local device's reading, or why it has none, by the label results give it."""
        backend = self.state.started.backend if self.state.started else str(self.state.device.get("backend", ""))
        indices = sorted(set(self.readings) | set(self.reading_errors))
        return {f"{backend}:{i}": self.readings.get(i) or self.reading_errors[i] for i in indices}

    def _show_diff(self) -> None:
        diff = self.query_one(DiffPanel)
        diff.show(self.state.template)
        added, removed = diff_counts(self.state.template)
        diff.border_subtitle = (f"+{added} -{removed} · {diff.mode} (d)" if added or removed else diff.mode)

    # telemetry ---------------------------------------------------------------------------------
    def _start_telemetry(self) -> None:
        self._telemetry_started = True
        started = self.state.started
        vendor = str(self.state.device.get("vendor", ""))
        nvidia = started.backend == "cuda" or "nvidia" in vendor.lower() or "nvidia" in started.device.lower()
        if self.cluster or self._remote():
            self.telemetry_note = REMOTE_NOTE
        elif not nvidia:
            self.telemetry_note = "NVML: none (not an NVIDIA GPU)"
        elif self.read_telemetry is None or not self._nvml_indices():
            self.telemetry_note = "NVML: not read in this dashboard"
        else:
            self.telemetry_note = "NVML: reading…"
            self._poll_telemetry()
            self._telemetry_timer = self.set_interval(1.0, self._poll_telemetry, name="telemetry")
        self._show_device()

    def _nvml_indices(self) -> list[int]:
        """The devices of this host the run measures on: those it was given, those its results
        name (`cuda:1`), else the one device; none once results come from a cluster's hosts.
        A device NVML could not read is not asked again."""
        if self._remote():
            return []
        named = [d.nvml_index for d in self.state.device_list() if d.nvml_index is not None]
        wanted = list(dict.fromkeys([*self.devices, *named])) or (
            [self.nvml_index] if self.nvml_index is not None else [])
        return [i for i in wanted if i not in self.reading_errors]

    def _remote(self) -> bool:
        """Whether results come from a cluster's devices, on other hosts."""
        return any(d.remote for d in self.state.devices.values())

    def _from_a_cluster(self) -> None:
        """Results come from a cluster's hosts: this host's GPU is not the one measuring. Stop
        reading it, and say why there is no telemetry."""
        self._stop_telemetry()
        self.readings.clear()
        self.telemetry, self.telemetry_note = None, REMOTE_NOTE
        self._show_device()

    def _poll_telemetry(self) -> None:
        indices = self._nvml_indices()
        if self._remote():
            self._from_a_cluster()
        elif not indices:  # every device failed to read
            self._stop_telemetry()
        else:
            self._read_telemetry(tuple(indices))

    @work(thread=True, exclusive=True, group="telemetry", exit_on_error=False)
    def _read_telemetry(self, indices: tuple[int, ...]) -> None:
        assert self.read_telemetry is not None
        for i in indices:
            try:
                reading = self.read_telemetry(i)
            except NVMLUnavailable as e:
                self.post_message(TelemetryRead(None, str(e), i))
            else:
                self.post_message(TelemetryRead(reading, index=i))

    def on_telemetry_read(self, message: TelemetryRead) -> None:
        if self._remote():
            self._from_a_cluster()
            return
        i = message.index
        if i is None:  # reading failed as a whole: say so once and stop asking
            self.readings.clear()
            self.telemetry, self.telemetry_note = None, message.error or "NVML: unavailable"
            self._stop_telemetry()
            self._show_device()
            return
        if message.reading is not None:
            self.readings[i] = message.reading
            self.reading_errors.pop(i, None)
        else:
            # NVML cannot read this device: say why once, and stop asking for it.
            self.readings.pop(i, None)
            self.reading_errors[i] = message.error or "NVML: unavailable"
        left = self._nvml_indices()
        first = left[0] if left else i  # the panel's one reading, when it shows one device
        self.telemetry = self.readings.get(first)
        self.telemetry_note = self.reading_errors.get(first, "")
        if not left:
            self._stop_telemetry()
        self._show_device()

    def _stop_telemetry(self) -> None:
        if self._telemetry_timer is not None:
            self._telemetry_timer.stop()
            self._telemetry_timer = None

    # the engine --------------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def _run_engine(self) -> Any:
        assert self.engine is not None
        return self.engine()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """Every worker's end comes here: the engine's outcome or failure, a telemetry error."""
        worker = event.worker
        if worker.group == "engine":
            if event.state == WorkerState.SUCCESS:
                self.outcome = worker.result
                self.post_message(RunEnded(getattr(worker.result, "reason", "finished")))
            elif event.state == WorkerState.ERROR:
                error = worker.error
                self.run_error = error
                self.post_message(RunEnded("failed", f"{error}" if error is not None else "the run failed", 1))
        elif worker.group == "telemetry" and event.state == WorkerState.ERROR:
            self.post_message(TelemetryRead(None, f"NVML: {worker.error}"))

    def on_run_ended(self, message: RunEnded) -> None:
        self.engine_done = True
        self._stop_telemetry()
        # Take in what the engine said last before anything else.
        self._apply(self.feed.poll())
        if message.error is not None:
            if self.state.started is None:
                # Nothing ran (no device, no feasible configuration): the command prints the error.
                self.exit(1, return_code=1)
                return
            self.state.fail(f"the run failed: {message.error}")
            self._sync()
            self.notify(message.error, title="The run failed", severity="error", timeout=10)
        if self._quit_when_done:
            self._leave()

    def _exit_code(self) -> int:
        return 0 if self.state.best is not None and self.run_error is None else 1

    def _leave(self) -> None:
        code = self._exit_code() if self.mode == "live" else 0
        self.exit(code, return_code=code)

    # actions -----------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Actions of the other mode are off (and off the footer): no pausing a replay's engine."""
        if action in ("next_panel", "previous_panel") and self.screen is not self.screen_stack[0]:
            return False  # over a dialog, tab moves within the dialog
        if self._filtering() and action != "clear_filter":
            return False  # while the filter is typed, the footer shows the filter's own keys
        modes = [a.modes for a in ACTIONS if a.action.split("(")[0] == action]
        return any(self.mode in m for m in modes) if modes else True

    def action_toggle_pause(self) -> None:
        if self.run_control is not None and not self.engine_done:
            if self.run_control.paused:
                self.run_control.resume()
            else:
                self.run_control.pause()
        self.refresh_title()

    def action_toggle_play(self) -> None:
        self._replay().toggle()
        self.refresh_title()

    def action_stop(self) -> None:
        if self.run_control is None or self.engine_done:
            self.notify("The run has already ended.")
            return
        if not self._stop_armed:
            self._stop_armed = True
            self.set_timer(3.0, self._disarm_stop)
            self.notify("Press s again to stop the run after the current configuration.", timeout=3)
            return
        self._stop_armed = False
        self._stopping = True
        self.run_control.stop("stopped from the dashboard")
        self.refresh_title()

    def _disarm_stop(self) -> None:
        self._stop_armed = False

    def _replay(self) -> ReplayFeed:
        assert isinstance(self.feed, ReplayFeed)
        return self.feed

    def action_faster(self) -> None:
        self._replay().faster()
        self.refresh_title()

    def action_slower(self) -> None:
        self._replay().slower()
        self.refresh_title()

    def action_step(self) -> None:
        feed = self._replay()
        self._apply(Batch(feed.step(), _now()))

    def action_to_end(self) -> None:
        feed = self._replay()
        self._apply(Batch(feed.to_end(), _now()))

    def action_restart(self) -> None:
        feed = self._replay()
        feed.restart()
        self.state = DashboardState(self.state.header)
        self.query_one(Leaderboard).state = self.state
        self.query_one(PlanPanel).state = self.state
        self._sync()

    def action_toggle_failed(self) -> None:
        board = self.query_one(Leaderboard)
        if not board.view.show_failed and not self.state.failed_count:
            self.notify("No configuration has failed" + (" so far." if self.state.running else "."))
            return
        # On a wide screen the failed view takes the side panels' room, for the messages.
        self.set_class(board.toggle_failed(), "-failed")
        self.call_after_refresh(self._refit_board)

    def action_filter(self) -> None:
        self.action_panel("board")
        board = self.query_one(Leaderboard)
        board.add_class("-filtering")
        self.query_one("#board-filter", Input).focus()

    @on(Input.Changed, "#board-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.query_one(Leaderboard).set_filter(event.value)

    @on(Input.Submitted, "#board-filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self._close_filter()

    def _close_filter(self) -> None:
        board = self.query_one(Leaderboard)
        board.remove_class("-filtering")
        self.query_one("#board-table", DataTable).focus()

    def _filtering(self) -> bool:
        focused = self.focused
        return isinstance(focused, Input) and focused.id == "board-filter"

    def action_clear_filter(self) -> None:
        """Escape in the filter line: drop the filter and close the line."""
        line = self.query_one("#board-filter", Input)
        with line.prevent(Input.Changed):
            line.value = ""
        self.query_one(Leaderboard).set_filter("")
        self._close_filter()

    def action_next_sort(self) -> None:
        self.query_one(Leaderboard).next_sort()

    def action_reverse_sort(self) -> None:
        self.query_one(Leaderboard).reverse_sort()

    def action_sort(self, column: str) -> None:
        self.query_one(Leaderboard).sort_by(column)

    def action_details(self) -> None:
        key = self.query_one(Leaderboard).selected_key()
        if key is None:
            self.notify("No configuration is selected.")
            return
        self.push_screen(DetailsScreen(self.state, key))

    def action_view_source(self) -> None:
        key = self.query_one(Leaderboard).selected_key()
        if key is None:
            self.notify("No configuration is selected.")
            return
        state = self.state
        r = state.entries[key].result
        rank = state.rank(key)
        try:
            source = config_source(state.header, r, rank=rank, ranked=state.ranked_count,
                                   default_us=state.default_us, session_path=self.session_path,
                                   template=state.template_of(key))
        except ExportError as e:
            self.notify(str(e), title="No source", severity="warning")
            return
        template = str(state.template.get("name") or "kernel")
        backend = str(state.template.get("backend") or state.device.get("backend") or "")
        title = f"Source · {template} · " + (f"rank {rank}" if rank else r.status)
        self.push_screen(SourceScreen(title, source, backend, source_name(template, backend, rank, r.status)))

    def action_mark(self) -> None:
        key = self.query_one(Leaderboard).selected_key()
        if key is None:
            self.notify("No configuration is selected.")
            return
        if key in self._marked:
            self._marked.remove(key)
            self.notify("Unmarked.")
            return
        self._marked = (self._marked + [key])[-2:]
        self.notify(f"Marked {len(self._marked)} of 2" + ("; c compares them." if len(self._marked) == 2 else "."))

    def action_compare(self) -> None:
        keys = [k for k in self._marked if k in self.state.entries]
        if len(keys) < 2:
            self.notify("Mark two configurations with m first.")
            return
        a, b = (self.state.entries[k].result for k in keys)
        lines = [f"A: {printable(fmt_config(a.config))}", f"B: {printable(fmt_config(b.config))}", ""]
        self.push_screen(LinesScreen("Comparison", lines + contrast_lines(contrast_of(self.state, *keys))))

    def action_pareto(self) -> None:
        results = [e.result for e in self.state.entries.values()]
        lines = front_lines(results, str(self.state.header.get("tuning", {}).get("objective", "time")))
        if not lines:
            self.notify("No energy was measured: tune with --objective energy or edp on an NVIDIA GPU.")
            return
        self.push_screen(LinesScreen("Time against energy", lines))

    @on(DataTable.RowSelected, "#board-table")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value
        if key in self.state.entries:
            self.push_screen(DetailsScreen(self.state, key))

    @on(DataTable.HeaderSelected, "#board-table")
    def _header_selected(self, event: DataTable.HeaderSelected) -> None:
        if event.column_key.value and event.column_key.value != "message":
            self.action_sort(event.column_key.value)

    def action_panel(self, name: str) -> None:
        if name not in PANELS:
            return
        if name != "board":
            self.side = name
            for side in ("device", "plan", "diff"):
                self.query_one(f"#{side}").set_class(side == name, "-current")
        target = self.query_one("#board-table") if name == "board" else self.query_one(f"#{name}")
        target.focus()

    def _current_panel(self) -> str:
        focused = self.focused
        while focused is not None:
            if focused.id in PANELS:
                return focused.id
            focused = focused.parent
        return "board"

    def action_next_panel(self) -> None:
        i = PANELS.index(self._current_panel())
        self.action_panel(PANELS[(i + 1) % len(PANELS)])

    def action_previous_panel(self) -> None:
        i = PANELS.index(self._current_panel())
        self.action_panel(PANELS[(i - 1) % len(PANELS)])

    def action_toggle_diff(self) -> None:
        diff = self.query_one(DiffPanel)
        diff.toggle(self.state.template)
        self._show_diff()
        if not self.wide and self.side != "diff":
            self.action_panel("diff")

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.help_rows()))

    def help_rows(self) -> list[tuple[str, str, str]]:
        """(group, keys, description) for every action of this mode."""
        rows = []
        for a in ACTIONS:
            if self.mode in a.modes:
                rows.append((a.group, a.shown_keys or _first_key(a.keys), a.description))
        return rows

    # files -------------------------------------------------------------------------------------
    def _default_export(self, suffix: str) -> Path:
        # the session's template name is the default's stem, never its folder: the working folder
        return Path(f"{file_stem(str(self.state.template.get('name') or ''))}-best{suffix}")

    def notify(self, message: str, *, title: str = "", severity: str = "information",  # type: ignore[override]
               timeout: float | None = None, markup: bool = False) -> None:
        """Every notification's words are shown as they are: printable (tui/terminal.py), never
        read as markup (a path or an error quotes names from files)."""
        super().notify(printable(message), title=printable(title), severity=severity,  # type: ignore[arg-type]
                       timeout=timeout, markup=False)

    def action_save(self) -> None:
        if self.session_path is None:
            self.notify("This dashboard has no session file to copy.", severity="warning")
            return
        default = Path(self.session_path.stem + "-copy.toml")
        self.push_screen(PathPrompt("Save a copy of the session", default), self._save_to)

    def _save_to(self, path: Path | None) -> None:
        if path is None or self.session_path is None:
            return
        try:
            written = save_copy(self.session_path, path)
        except (ExportError, OSError) as e:
            self.notify(str(e), title="Not saved", severity="error")
            return
        self.notify(f"Saved a copy of the session to {written}")

    def action_export_header(self) -> None:
        self._export(".h", best_header, "Export the best configuration as a header")

    def action_export_json(self) -> None:
        self._export(".json", best_json, "Export the best configuration as JSON")

    def _export(self, suffix: str, render: Callable[..., str], title: str) -> None:
        if self.state.best is None:
            self.notify("No verified configuration yet: nothing to export.", severity="warning")
            return
        self.push_screen(PathPrompt(title, self._default_export(suffix)),
                         partial(self._write_export, render))

    def _write_export(self, render: Callable[..., str], path: Path | None) -> None:
        if path is None:
            return
        try:
            written = write_file(path, render(self.state, self.session_path), force=True)  # the prompt asked
        except (ExportError, OSError) as e:
            self.notify(str(e), title="Not exported", severity="error")
            return
        self.notify(f"Wrote {written}")

    async def action_quit(self) -> None:
        if self.mode == "live" and self.run_control is not None and not self.engine_done:
            if self._quit_when_done:
                self._leave()  # second q: do not wait for the configuration in flight
                return
            self._quit_when_done = True
            self.run_control.stop("quit from the dashboard")
            self.refresh_title()
            self.notify("Stopping after the current configuration; q again quits at once.", timeout=5)
            return
        self._leave()

    def screen_text(self) -> str:
        """The screen as plain text, as a terminal shows it (tests and the benchmark read it)."""
        width, height = self.size
        console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                          color_system=None, record=True, legacy_windows=False, safe_box=False)
        console.print(self.screen._compositor.render_update(full=True, screen_stack=self._background_screens))
        return console.export_text()

    # the command palette -----------------------------------------------------------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every action of this mode, by its description, then sorting by each column."""
        seen = set()
        for a in ACTIONS:
            if self.mode not in a.modes or a.action in ("command_palette",) or a.description in seen:
                continue
            seen.add(a.description)
            yield SystemCommand(a.description, f"key: {a.shown_keys or _first_key(a.keys)}",
                                partial(self.run_action, a.action))
        board = self.query_one(Leaderboard)
        for column in board.sort_columns():
            yield SystemCommand(f"Sort the leaderboard by {column_label(column)}", "key: o cycles",
                                partial(self.action_sort, column))
        yield from super().get_system_commands(screen)


class LiveDashboard(Dashboard):
    """The dashboard of a run in progress: pause, resume, stop."""

    mode = "live"
    BINDINGS = bindings_for("live")


class ReplayDashboard(Dashboard):
    """The dashboard of a recorded session: play, pause, speed, step, jump to the end."""

    mode = "replay"
    BINDINGS = bindings_for("replay")


def _now() -> float:
    return time.monotonic()


# entry points ------------------------------------------------------------------------------------
def replay_app(session: Session, speed: float = 1.0, paused: bool = False, **kw: Any) -> ReplayDashboard:
    """A dashboard that plays a loaded session back."""
    feed = ReplayFeed(session.events, speed=speed, paused=paused, **kw)
    return ReplayDashboard(feed=feed, state=DashboardState(session.header), session_path=session.path,
                           warnings=session.warnings)


def live_dashboard(make_run: Callable[[Callable[[Any], None]], Any], session_path: Path, device: int = 0,
                   telemetry: Callable[[int], Telemetry] | None = None, devices: Sequence[int] = (),
                   cluster: bool = False) -> LiveDashboard:
    """A dashboard showing a run live: `make_run(sink)` builds the driver (a TuneRun or the agent
    loop) that hands its header and events to `sink`, and the dashboard runs it in a thread worker.
    `devices`: the devices of this host a run over several measures on; `cluster`: it measures on a
    cluster's."""
    # The engine's worker is a spawned process, and spawning first starts multiprocessing's
    # resource tracker, handing it sys.stderr's descriptor. Inside the app sys.stderr is Textual's
    # capture, which has none: start the tracker now, while stderr is still the terminal.
    resource_tracker.ensure_running()
    feed = LiveFeed()
    run = make_run(feed)
    if telemetry is None:
        from kerntune.engine import nvml

        telemetry = nvml.telemetry
    # NVML numbers GPUs by PCI bus, CUDA fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID: with
    # one GPU, or that setting, the run's device index is NVML's.
    return LiveDashboard(feed=feed, state=DashboardState(), run=run, engine=run.run, session_path=session_path,
                         nvml_index=devices[0] if devices else device, telemetry=telemetry, devices=devices,
                         cluster=cluster)


def live_app(template: Any, options: Any, telemetry: Callable[[int], Telemetry] | None = None) -> LiveDashboard:
    """A dashboard that runs `TuneRun(template, options)` in a thread worker and shows it live."""
    from kerntune.engine.tune import TuneRun

    if options.session_path is None:
        options = replace(options, session_path=default_path(template.name))
    return live_dashboard(lambda feed: TuneRun(template, options, [feed]), options.session_path, options.device,
                          telemetry, options.devices, bool(options.cluster))
