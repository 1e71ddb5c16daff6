"""The import graph of kerntune's own modules, read from their source with `ast`: every import
statement wherever it stands (at the top, inside a function, under `if TYPE_CHECKING`), and
`importlib.import_module("kerntune....")` with a literal name."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class PrivateUse:
    """A name starting with one underscore that one module takes from another."""

    module: str
    line: int
    source: str  # the module the name belongs to
    name: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line} uses {self.source}.{self.name}"


def modules(root: Path = ROOT, packages: tuple[str, ...] = ("engine", "agents", "tui"),
            top: str = "kerntune") -> dict[str, tuple[Path, list[str]]]:
    """Module name -> (its file, the package its relative imports start from)."""
    files = {}
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = [top, *f.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
                files[".".join(parts)] = (f, parts)
            else:
                files[".".join(parts)] = (f, parts[:-1])
    return files


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def read(files: dict[str, tuple[Path, list[str]]]) -> tuple[dict[str, set[str]], list[PrivateUse]]:
    """The graph (module -> the modules of `files` it imports) and every private name taken across."""
    graph: dict[str, set[str]] = {}
    private: list[PrivateUse] = []
    for name, (f, package) in files.items():
        found: set[str] = set()
        bound: dict[str, str] = {}  # a local name -> the module of `files` it stands for
        tree = ast.parse(f.read_text(), str(f))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    found.add(a.name)
                    # `import a.b.c` binds a; `import a.b.c as x` binds x to a.b.c
                    bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = package[: len(package) - (node.level - 1)]
                    base = ".".join([*here, *([node.module] if node.module else [])])
                found.add(base)
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    if sub in files:  # `from . import model`
                        found.add(sub)
                        bound[a.asname or a.name] = sub
                    elif base in files and _private(a.name):
                        private.append(PrivateUse(name, node.lineno, base, a.name))
            elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
                  and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
                  and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                found.add(node.args[0].value)
        for node in ast.walk(tree):  # module.attribute.attribute: the longest module, then the name
            if isinstance(node, ast.Attribute):
                chain, cur = [], node
                while isinstance(cur, ast.Attribute):
                    chain.append(cur.attr)
                    cur = cur.value
                if not isinstance(cur, ast.Name) or cur.id not in bound:
                    continue
                path = [bound[cur.id], *reversed(chain)]
                for k in range(len(path), 0, -1):
                    owner = ".".join(path[:k])
                    if owner in files:
                        if k < len(path) and _private(path[k]) and owner != name:
                            private.append(PrivateUse(name, node.lineno, owner, path[k]))
                        break
        graph[name] = {m for m in found if m in files and m != name}
        # importing a.b.c runs the packages a and a.b first
        for m in list(graph[name]):
            parts = m.split(".")
            graph[name].update(p for p in (".".join(parts[:k]) for k in range(1, len(parts)))
                               if p in files and p != name)
    return graph, private


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import one another, each sorted (Tarjan's strongly connected
    components of more than one module, and a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    group = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        group.append(w)
                        if w == v:
                            break
                    if len(group) > 1 or v in graph.get(v, ()):
                        out.append(sorted(group))
    return out
