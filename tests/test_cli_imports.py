"""The command line's modules import one another without a cycle, and a command imports only what
it uses (so that `show` and `simulate` start fast)."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SESSION = Path(__file__).parent / "data" / "sessions" / "vector_add.toml"


def tui_imports() -> dict[str, set[str]]:
    """Every kerntune.tui module and the kerntune.tui modules it imports, wherever the import
    statement stands (at the top or inside a function)."""
    files = {}
    for f in sorted((ROOT / "tui").rglob("*.py")):
        parts = ["kerntune", *f.relative_to(ROOT).with_suffix("").parts]
        name = ".".join(parts if parts[-1] != "__init__" else parts[:-1])
        files[name] = (f, parts[:-1])  # the package its relative imports start from
    graph: dict[str, set[str]] = {}
    for name, (f, package) in files.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = package[: len(package) - (node.level - 1)]
                    base = ".".join([*here, *([node.module] if node.module else [])])
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)  # `from . import widgets`
        graph[name] = {m for m in found if m in files and m != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as the path that closes it (a, b, a), or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_command_line_modules_import_one_another_without_a_cycle():
    graph = tui_imports()
    assert {"kerntune.tui.cli", "kerntune.tui.launch", "kerntune.tui.parser", "kerntune.tui.errors"} <= set(graph)
    assert "kerntune.tui.launch" in graph["kerntune.tui.cli"]  # the graph sees imports inside functions
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


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
