"""One compile process (engine/compile_child.py `serve`) and its pipe: what the compile pool
(engine/compile_pool.py) runs its compilers in, and what engine/standby.py starts ahead of a run."""

from __future__ import annotations

from typing import Any

from . import children


class CompileProcess:
    """One compile process (engine/compile_child.py `serve`) and its pipe."""

    def __init__(self) -> None:
        self.popen, self.conn = children.start("kerntune.engine.compile_child", "serve")
        self.owed = 0  # answers to ("warm", arch) requests still to be read
        self.warmed = ""  # the architecture it was last asked to warm for

    def warm(self, arch: str) -> None:
        """Ask it to load the compiler and build an empty kernel for `arch`; the answer is read
        before its next request's."""
        try:
            self.conn.send(("warm", arch))
        except OSError:
            return  # found when it is used
        self.owed += 1
        self.warmed = arch

    def settle(self, timeout: float | None = None) -> bool:
        """Read the answers owed; whether it has none left (False after `timeout`)."""
        while self.owed:
            if not self.conn.poll(timeout):
                return False
            self.conn.recv()
            self.owed -= 1
        return True

    def call(self, request: tuple) -> tuple[str, Any]:
        """The process's answer; EOFError or OSError when it died."""
        self.settle()
        self.conn.send(request)
        return self.conn.recv()

    def stop(self) -> None:
        """End the process (from any thread: one waiting for its answer then reads the end)."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()

    def close(self) -> None:
        """Stop it and close the pipe: only by the thread that holds it, or for an idle one."""
        self.stop()
        self.conn.close()
