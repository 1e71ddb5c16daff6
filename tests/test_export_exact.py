"""`kerntune show SESSION --source --config N` prints the program that was measured, for every row
of an agent loop's session: compiled as printed and launched as its comment says, each reproduces
the outputs the row was verified with."""

import re
from pathlib import Path

import numpy as np
import pytest

from kerntune.engine.session import load_session
from kerntune.tui.cli import main
from kerntune.tui.state import DashboardState

cl = pytest.importorskip("pyopencl")

DATA = Path(__file__).resolve().parent / "data" / "export"
QUICK = ["--headless", "--no-probe", "--repeats", "5", "--seed", "11"]
LAUNCH = re.compile(r"launch: grid (\d+) x (\d+) x (\d+) work-groups, block (\d+) x (\d+) x (\d+) work-items")


def run_export(ctx, queue, text: str, n: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The exported file compiled as it stands and launched as its comment says."""
    m = LAUNCH.search(text)
    assert m, text[:400]
    grid, block = [int(v) for v in m.groups()[:3]], [int(v) for v in m.groups()[3:]]
    kernel = cl.Kernel(cl.Program(ctx, text).build(), "axpy")
    mf = cl.mem_flags
    out = np.full(n, np.nan, dtype=np.float32)
    bufs = [cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a) for a in (out, x, y)]
    kernel.set_args(*bufs, np.int32(n))
    cl.enqueue_nd_range_kernel(queue, kernel, tuple(g * b for g, b in zip(grid, block)), tuple(block)).wait()
    cl.enqueue_copy(queue, out, bufs[0]).wait()
    return out


def test_every_row_of_a_loop_session_exports_the_program_it_measured(tmp_path, capsys):
    session = tmp_path / "s.toml"
    assert main(["tune", str(DATA / "kernel.toml"), "--agent", "rules", "--rounds", "1", "--budget", "4",
                 "--backend", "opencl", "--session", str(session), *QUICK]) == 0
    capsys.readouterr()
    s = load_session(session)
    state = DashboardState(s.header)
    state.apply_all(s.events)
    assert state.ranked_count >= 3  # the original and at least two configurations of the template
    n = int(s.header["space"]["problem"]["n"])
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    want = 2.0 * x + y
    ctx = cl.create_some_context(interactive=False)
    queue = cl.CommandQueue(ctx)
    launches = set()
    for rank in range(1, state.ranked_count + 1):
        assert main(["show", str(session), "--source", "--config", str(rank)]) == 0
        text = capsys.readouterr().out
        config = state.entries[state.ranked_key(rank)].result.config
        assert all(f"#define {k} " in text for k in config)
        if not config:
            assert "#ifndef" not in text  # the original is its own source
        launches.add(LAUNCH.search(text).groups())
        got = run_export(ctx, queue, text, n, x, y)
        assert np.allclose(got, want, rtol=1e-5, atol=1e-6), (rank, config, int(np.isnan(got).sum()))
    assert len(launches) >= 2  # the rows do not all share one launch: each is its own
