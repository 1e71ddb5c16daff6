"""The command line's modules import one another without a cycle, and a command imports only what
it uses (so that `show` and `simulate` start fast)."""

import subprocess
import sys
from pathlib import Path

from import_graph import cycles, modules, read

SESSION = Path(__file__).parent / "data" / "sessions" / "vector_add.toml"


def tui_imports() -> dict[str, set[str]]:
    """Every kerntune.tui module and the kerntune.tui modules it imports, wherever the import
    statement stands (at the top or inside a function)."""
    return read(modules(packages=("tui",)))[0]


def test_the_command_line_modules_import_one_another_without_a_cycle():
    graph = tui_imports()
    assert {"kerntune.tui.cli", "kerntune.tui.launch", "kerntune.tui.parser", "kerntune.tui.errors"} <= set(graph)
    assert "kerntune.tui.launch" in graph["kerntune.tui.cli"]  # the graph sees imports inside functions
    assert cycles(graph) == []


def test_nothing_imports_the_command_lines_entry_module():
    # `python -m kerntune.tui.cli` runs cli.py as __main__: a module importing kerntune.tui.cli
    # would load it a second time, with classes of its own
    graph = tui_imports()
    assert [m for m, deps in graph.items() if "kerntune.tui.cli" in deps] == []


def test_show_simulate_and_replay_do_not_import_the_tuning_machinery():
    code = ("import sys, contextlib, io; from kerntune.tui.cli import main\n"
            "heavy = ('kerntune.engine.tune', 'kerntune.engine.backends', 'kerntune.engine.campaign',\n"
            "         'kerntune.engine.loop', 'numpy')\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['show', {str(SESSION)!r}, '--json']) == 0\n"
            f"    assert main(['simulate', {str(SESSION)!r}, '--strategy', 'grid', '--json']) == 0\n"
            f"    assert main(['simulate', {str(SESSION)!r}, '--strategy', 'random']) == 0\n"
            "print(' '.join(m for m in heavy + ('kerntune.tui.launch', 'textual', 'rich') if m in sys.modules))\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['replay', {str(SESSION)!r}]) == 0  # as text: the output is no terminal\n"
            "print(' '.join(m for m in heavy if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n") == ["", "", ""]
