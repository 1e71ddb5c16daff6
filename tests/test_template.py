"""kernel.toml loading: the built-ins load, and every malformed spec is one clear line."""

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kerntune import templates
from kerntune.engine.template import TemplateError, load_template, parse_template

GOOD = """
constraints = ["BLOCK % 32 == 0"]

[kernel]
name = "scale"
entry = "scale"
sources = { opencl = "kernel.cl" }

[[param]]
name = "BLOCK"
values = [32, 64]
default = 64

[launch]
grid = ["ceil_div(n, BLOCK)"]
block = ["BLOCK"]

[[arg]]
name = "x"
dtype = "float32"
role = "inout"
shape = ["n"]

[[arg]]
name = "n"
dtype = "int32"
role = "scalar"
value = "n"

[[problem]]
name = "small"
n = 1000

[cost]
bytes = "8 * n"
"""
SOURCE = "__kernel void scale(__global float *x, int n) { int i = get_global_id(0); if (i < n) x[i] *= BLOCK; }"


def write(tmp_path: Path, spec: str, source: str = SOURCE) -> Path:
    (tmp_path / "kernel.cl").write_text(source)
    p = tmp_path / "kernel.toml"
    p.write_text(spec)
    return p


@pytest.mark.parametrize("name", templates.names())
def test_builtin_templates_load(name):
    t = load_template(templates.path(name))
    assert t.name == name
    assert t.parameters and t.problems
    # the bfloat16 variants are CUDA only (OpenCL has no bfloat16)
    assert set(t.sources) == ({"cuda"} if name.endswith("_bf16") else {"cuda", "opencl"})
    assert t.reference_path is not None and t.reference_path.is_file()
    for p in t.parameters:
        assert p.default in p.values
        for src in t.sources.values():
            assert f"#ifndef {p.name}" in src, f"{name}: {p.name} has no #ifndef default"


def test_a_good_spec_parses_into_its_parts(tmp_path):
    t = load_template(write(tmp_path, GOOD))
    assert [p.name for p in t.parameters] == ["BLOCK"]
    assert t.default_config() == {"BLOCK": 64}
    assert t.problem().values == {"n": 1000}
    assert t.problem(None, {"n": 7}).values == {"n": 7}
    assert [a.role for a in t.arguments] == ["inout", "scalar"]
    assert t.cost_bytes.evaluate({"n": 10}) == 80


def _replace(old, new):
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


MALFORMED = [
    ("not toml [[", "not valid TOML"),
    (_replace('name = "scale"\nentry', 'name = 5\nentry'), "[kernel.name] expected a string"),
    (_replace('sources = { opencl = "kernel.cl" }', 'sources = { metal = "kernel.cl" }'), "[kernel.sources.metal]"),
    (_replace('sources = { opencl = "kernel.cl" }', 'sources = { opencl = "missing.cl" }'), "missing.cl not found"),
    (_replace('sources = { opencl = "kernel.cl" }', 'sources = { opencl = "../../etc/passwd" }'), "a file name beside the spec"),
    (_replace("default = 64", "default = 48"), "[param.BLOCK.default] expected one of its values"),
    (_replace("values = [32, 64]", "values = []"), "[param.BLOCK.values]"),
    (_replace("values = [32, 64]", 'values = ["a"]'), "numbers or booleans only"),
    (_replace("values = [32, 64]", "values = [32, 32]"), "distinct values"),
    (_replace('["BLOCK % 32 == 0"]', '["BLOCK %% 32"]'), "[constraints[0]] expected a valid expression"),
    (_replace('["BLOCK % 32 == 0"]', '["__import__(\'os\')"]'), "[constraints[0]]"),
    (_replace('["BLOCK % 32 == 0"]', '["WIDTH > 2"]'), "only known names, not WIDTH"),
    (_replace('grid = ["ceil_div(n, BLOCK)"]', 'grid = [1, 2, 3, 4]'), "[launch.grid]"),
    (_replace('block = ["BLOCK"]', ""), "[launch.block] expected a list"),
    (_replace('dtype = "float32"', 'dtype = "float128"'), "[arg.x.dtype] expected one of"),
    (_replace('role = "inout"', 'role = "both"'), "[arg.x.role]"),
    (_replace('role = "inout"', 'role = "input"'), "[arg] expected at least one argument with role output"),
    (_replace('shape = ["n"]', 'shape = "n"'), "[arg.x.shape]"),
    (_replace('value = "n"', ""), "[arg.n.value]"),
    (_replace("n = 1000", "n = -1"), "[problem[0].n] expected a non-negative integer"),
    (_replace("n = 1000", 'n = "big"'), "[problem[0].n]"),
    (_replace('bytes = "8 * n"', 'bytes = "8 * BLOCK"'), "[cost.bytes] expected only known names"),
    (_replace("[cost]\nbytes", "[cost]\nflop = 1\nbytes"), "[cost.flop] expected one of the known keys"),
    (_replace("[kernel]", "[kernal]\n[kernel]"), "[kernal] expected one of the known keys"),
    (_replace('name = "BLOCK"', 'name = "2BLOCK"'), "[param[0].name] expected a C identifier"),
    (_replace('entry = "scale"', 'entry = "missing"'), "missing not found"),
    (GOOD.split("[[problem]]")[0] + "\n[cost]\nbytes = 1\n", "[problem] expected at least one"),
]


@pytest.mark.parametrize("spec, expected", MALFORMED)
def test_malformed_specs_give_one_line_naming_the_file_and_key(tmp_path, spec, expected):
    p = write(tmp_path, spec)
    with pytest.raises(TemplateError) as info:
        load_template(p)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(str(p))
    assert expected in msg


def test_a_parameter_the_source_never_uses_is_refused(tmp_path):
    p = write(tmp_path, GOOD, SOURCE.replace("*= BLOCK", "*= 2"))
    with pytest.raises(TemplateError, match=r"param.BLOCK.*never mentions BLOCK"):
        load_template(p)


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(TemplateError, match="no such file"):
        load_template(tmp_path / "nothing.toml")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzzed_specs_load_or_fail_with_one_line(tmp_path, data):
    # Cut, duplicate or corrupt a line of a good spec: the loader either accepts it or says why.
    lines = GOOD.splitlines()
    i = data.draw(st.integers(0, len(lines) - 1))
    action = data.draw(st.sampled_from(["drop", "dup", "garble", "truncate"]))
    if action == "drop":
        del lines[i]
    elif action == "dup":
        lines.insert(i, lines[i])
    elif action == "garble":
        lines[i] = data.draw(st.text(max_size=30))
    else:
        lines = lines[:i]
    p = write(tmp_path, "\n".join(lines))
    try:
        load_template(p)
    except TemplateError as e:
        assert "\n" not in str(e)
        assert re.match(re.escape(str(p)), str(e))


def test_parse_template_never_raises_other_errors_on_random_bytes(tmp_path):
    import random

    rng = random.Random(7)
    (tmp_path / "kernel.cl").write_text(SOURCE)
    for _ in range(200):
        text = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))).decode("latin-1")
        with pytest.raises(TemplateError):
            parse_template(text, tmp_path / "kernel.toml")


@pytest.mark.parametrize("files,grid,block", [("original", "original_grid", "original_block"),
                                              ("baseline", "baseline_grid", "baseline_block")])
def test_the_original_kernels_files_and_launch_load_under_their_keys_and_the_earlier_ones(tmp_path, files, grid, block):
    (tmp_path / "original.cl").write_text(SOURCE.replace("BLOCK", "2"))
    spec = GOOD.replace('sources = { opencl = "kernel.cl" }',
                        f'sources = {{ opencl = "kernel.cl" }}\n{files} = {{ opencl = "original.cl" }}')
    spec = spec.replace('block = ["BLOCK"]', f'block = ["BLOCK"]\n{grid} = ["ceil_div(n, 256)"]\n{block} = [256]')
    t = load_template(write(tmp_path, spec))
    assert t.original_sources["opencl"] == SOURCE.replace("BLOCK", "2")
    assert [e.source for e in t.original_grid] == ["ceil_div(n, 256)"] and [e.source for e in t.original_block] == ["256"]


def test_the_original_under_both_its_key_and_the_earlier_one_is_one_line(tmp_path):
    spec = GOOD.replace('block = ["BLOCK"]', 'block = ["BLOCK"]\noriginal_block = [256]\nbaseline_block = [256]')
    with pytest.raises(TemplateError, match=r"\[launch.original_block\] expected one of original_block and "
                                            r"baseline_block \(its earlier name\), not both"):
        load_template(write(tmp_path, spec))
