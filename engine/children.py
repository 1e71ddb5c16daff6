"""New Python processes for the engine's children: the evaluation worker and the compile processes.

Each child is a new interpreter, `python -c "from MODULE import FUNCTION; FUNCTION()" FD`, that
talks to the run over a pipe (a multiprocessing Connection on descriptor FD). Unlike a
multiprocessing child, it does not import the parent's main module before its own code runs: a
program that runs kerntune inside its own process (a bench, a notebook, a service) would otherwise
have every child import all of that program's modules (numpy and the engine, 0.4 s on the GPU
machine, and longer with a dozen children starting at once). The child finds modules where the
parent does (the parent's module path is its PYTHONPATH).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
from multiprocessing.connection import Connection


def start(module: str, function: str) -> tuple[subprocess.Popen, Connection]:
    """A child running `module.function()`, and the parent's end of its pipe. OSError when the
    process cannot be started."""
    parent, child = mp.Pipe()
    fd = child.fileno()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        popen = subprocess.Popen([sys.executable, "-c", f"from {module} import {function}; {function}()", str(fd)],
                                 pass_fds=(fd,), stdin=subprocess.DEVNULL, env=env)
    except OSError:
        parent.close()
        raise
    finally:
        child.close()
    return popen, parent


def connect() -> Connection:
    """In the child: its end of the pipe."""
    return Connection(int(sys.argv[-1]))


def default_jobs() -> int:
    """Compile processes: every core but those the evaluation worker, the run itself and the
    driver need (on the H200's 16 cores, 13 build 1.5x more configurations per second than 16)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores - 3 if cores >= 8 else cores - 1 if cores >= 4 else cores)
