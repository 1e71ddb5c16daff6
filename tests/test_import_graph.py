"""kerntune's engine, agents and UI import one another without a cycle (imports inside functions
count) and no module takes another's private (underscore) names."""

import textwrap

from import_graph import cycles, modules, read


def write(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_reader_sees_cycles_through_imports_inside_functions_and_private_names_at_any_depth(tmp_path):
    write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from .b import public\n",
        "pkg/b.py": "def public():\n    from . import c\n    return c._hidden\n",
        "pkg/c.py": "import importlib\ndef later():\n    return importlib.import_module('kt.pkg.a')\n",
        "pkg/d.py": "from kt.pkg.sub.e import _inner\nimport kt.pkg.sub.e as e\nx = e._other\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/e.py": "_inner = 1\n_other = 2\ny = _inner\n",
    })
    graph, private = read(modules(tmp_path, ("pkg",), "kt"))
    assert cycles(graph) == [["kt.pkg.a", "kt.pkg.b", "kt.pkg.c"]]
    assert {(p.module, p.source, p.name) for p in private} == {
        ("kt.pkg.b", "kt.pkg.c", "_hidden"), ("kt.pkg.d", "kt.pkg.sub.e", "_inner"),
        ("kt.pkg.d", "kt.pkg.sub.e", "_other")}
    assert "kt.pkg.sub" in graph["kt.pkg.d"]  # a module's packages run before it
    assert cycles({"a": {"b"}, "b": set()}) == [] and cycles({"a": {"a"}}) == [["a"]]


def test_engine_agents_and_ui_import_one_another_without_a_cycle():
    graph, _ = read(modules())
    assert "kerntune.agents.rewrites" in graph and "kerntune.engine.backends.opencl" in graph
    assert cycles(graph) == []


def test_no_module_takes_another_modules_private_names():
    _, private = read(modules())
    assert [str(p) for p in private] == []


def test_the_engine_imports_neither_the_agents_nor_the_ui():
    graph, _ = read(modules())
    above = {m: sorted(d for d in deps if d.startswith(("kerntune.agents", "kerntune.tui")))
             for m, deps in graph.items() if m.startswith("kerntune.engine")}
    assert {m: d for m, d in above.items() if d} == {}
