"""Messages that background work posts to the dashboard (small, plain, one module)."""

from __future__ import annotations

from textual.message import Message

from kerntune.engine.nvml import Telemetry


class TelemetryRead(Message):
    """One NVML reading of device `index`, or the one line that says why there is none (for every
    device when `index` is None)."""

    def __init__(self, reading: Telemetry | None, error: str | None = None, index: int | None = None) -> None:
        super().__init__()
        self.reading = reading
        self.error = error
        self.index = index


class RunEnded(Message):
    """The engine's run returned (normally, stopped, or with an error that ended it)."""

    def __init__(self, reason: str, error: str | None = None, exit_code: int = 0) -> None:
        super().__init__()
        self.reason = reason
        self.error = error
        self.exit_code = exit_code
