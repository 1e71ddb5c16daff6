"""`kerntune init`: a starting kernel.toml from a kernel's signature, and the check of a filled-in one.

What the signature tells is written out: the kernel's name, its sources, every argument with its
dtype and role (const pointers are inputs, pointers the body writes are outputs, or inouts when it
reads them too), and integer scalars as problem sizes of the same name. What only the user knows
is left as a "TODO" string — problem sizes, buffer shapes, launch geometry, the bytes the kernel
must move — which `check_spec` finds and names in one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from . import host_launch
from .device import DeviceLimits
from .expressions import ExpressionError
from .footprint import available_host_bytes, check_values, fmt_bytes
from .signature import CTYPES, INTEGER_DTYPES, IndexUse, KernelArg, KernelSignature, SignatureError, index_uses, parse_kernel
from .template import (DTYPES, NAME_RE, SOURCE_BYTES, TemplateError, load_template, read_text_file, read_toml_file,
                       spec_options)

TODO = "TODO"


@dataclass(frozen=True)
class Starter:
    """A starting spec: its text, the kernel it describes, and what is left to fill in."""

    text: str
    signature: KernelSignature
    todo: tuple[str, ...]


@dataclass(frozen=True)
class ReadLaunch:
    """A kernel's launch as the file's host code makes it, over the problem names where it can be."""

    grid: list[str] | None  # None: it reads something that is not a problem name
    block: list[str] | None
    shared: str | None
    shared_written: str  # the dynamic shared memory the file asks for, as written ("" for none)
    written: str
    line: int


def file_launch(sig: KernelSignature | None, problem_names: list[str]) -> ReadLaunch | None:
    """The first `<<<...>>>` launch of the kernel in its file, read over its scalar arguments."""
    if sig is None or not sig.launches:
        return None
    launch = sig.launches[0]
    params = [a.name for a in sig.args]
    names = set(problem_names)

    def over(expr: str) -> list[str] | None:
        got = [host_launch.over_problem(d, launch, params, names) for d in host_launch.dims(expr, launch)]
        return None if any(g is None for g in got) or not got else got  # type: ignore[return-value]

    grid = over(launch.config[0]) if launch.config else None
    block = over(launch.config[1]) if len(launch.config) > 1 else None
    shared, asked = None, ""
    if len(launch.config) > 2 and launch.config[2].strip() not in ("0", "0u", "0U"):
        asked = launch.config[2].strip()
        s = over(asked)
        shared = s[0] if s is not None and len(s) == 1 else None
    return ReadLaunch(grid, block, shared, asked, launch.written(), launch.line)


def _toml_list(values: list[str]) -> str:
    """A launch list: numbers as numbers, expressions as strings."""
    return "[" + ", ".join(v if v.isdigit() else '"' + v.replace('"', "") + '"' for v in values) + "]"


def read_kernel(path: Path, entry: str | None = None) -> KernelSignature:
    """The kernel in a source file; SignatureError (one line) when there is none."""
    return parse_kernel(read_text_file(path, SignatureError, SOURCE_BYTES), entry, str(path), folders=(path.resolve().parent,))


def merged_args(cuda: KernelSignature | None, opencl: KernelSignature | None) -> tuple[KernelArg, ...]:
    """The arguments of one kernel in two dialects, which must agree; a write seen in either counts."""
    sigs = [s for s in (cuda, opencl) if s is not None]
    if len(sigs) == 1:
        return sigs[0].args
    a, b = sigs
    if [x.name for x in a.args] != [x.name for x in b.args]:
        raise SignatureError(f"the CUDA and OpenCL kernels take different arguments "
                             f"({', '.join(x.name for x in a.args)} / {', '.join(x.name for x in b.args)})")
    out = []
    for x, y in zip(a.args, b.args):
        if x.pointer != y.pointer or x.dtype != y.dtype:
            raise SignatureError(f"argument {x.name} is `{x.ctype}{' *' if x.pointer else ''}` in CUDA "
                                 f"but `{y.ctype}{' *' if y.pointer else ''}` in OpenCL")
        out.append(KernelArg(x.name, x.ctype, x.pointer, x.const and y.const, x.written or y.written,
                             x.read or y.read, x.local or y.local))
    return tuple(out)


def starter_spec(sources: dict[str, str], cuda: KernelSignature | None,
                 opencl: KernelSignature | None, origin: str = "") -> Starter:
    """The text of a starting kernel.toml; `sources` maps backend to a file name beside the spec."""
    sig = cuda or opencl
    assert sig is not None
    args = merged_args(cuda, opencl)
    todo: list[str] = []
    problem_names = [a.name for a in args if not a.pointer and a.dtype in INTEGER_DTYPES]
    indices = found_indices(cuda, opencl)
    lines = [
        f"# kernel.toml for {sig.name}, written by `kerntune init`{f' from {origin}' if origin else ''}.",
        '# Fill in every "TODO", then run `kerntune init --check` on this file. Nothing here is run as',
        "# code: expressions are arithmetic over the problem names (and parameters, once there are any).",
        "",
        "# serves = [\"prefill\", \"decode\"]   # the [[problem]] sizes the kernel serves: each is tuned, then",
        "#                                     # one configuration is chosen for all of them",
        "",
        "[kernel]",
        f'name = "{sig.name}"',
        'description = ""',
        f'entry = "{sig.entry}"'
        + (f"   # one of: {', '.join(sig.name + i.text for i in sig.instantiations)}"
           if len(sig.instantiations) > 1 else ""),
        "sources = { " + ", ".join(f'{b} = "{f}"' for b, f in sorted(sources.items())) + " }",
        "",
        "# The original kernel's own launch, over the problem names"
        + (f" ({', '.join(problem_names)})." if problem_names else "."),
        "[launch]",
    ]
    read = file_launch(cuda, problem_names)
    if read is not None and read.grid is not None:
        lines.append(f"grid = {_toml_list(read.grid)}   # from the file's launch {read.written} (line {read.line})")
    else:
        lines.append('grid = ["TODO"]   # blocks (work-groups), e.g. "ceil_div(n, 256)" or "tokens"'
                     + (f"; the file launches it as {read.written} (line {read.line})" if read is not None else ""))
        todo.append("launch.grid")
    hint = cuda.block_hint if cuda is not None and cuda.block_hint else (opencl.block_hint if opencl else ())
    if read is not None and read.block is not None:
        lines.append(f"block = {_toml_list(read.block)}   # from the file's launch")
    elif hint:
        dims = [d for d in hint]
        while len(dims) > 1 and dims[-1] == 1:
            dims.pop()
        lines.append(f"block = {dims}   # threads per block, from the kernel's launch bounds")
    else:
        lines.append('block = ["TODO"]  # threads per block (work-group size), e.g. 256')
        todo.append("launch.block")
    # dynamic shared memory: every launch of the kernel carries it (CUDA's launch argument, an
    # OpenCL `__local` pointer argument the engine passes where the kernel declares it)
    declared = next((s.dynamic_shared for s in (cuda, opencl) if s is not None and s.dynamic_shared), "")
    if read is not None and read.shared is not None:
        lines.append(f"shared_bytes = {_toml_list([read.shared])[1:-1]}   # from the file's launch")
    elif read is not None and read.shared_written:
        lines.append(f'shared_bytes = "TODO"   # dynamic shared memory: the file\'s launch {read.written} '
                     f"(line {read.line}) asks for {read.shared_written} bytes")
        todo.append("launch.shared_bytes")
    elif declared:
        lines.append(f'shared_bytes = "TODO"   # bytes of dynamic shared memory a block gets: the kernel declares '
                     f'`{declared}`, e.g. "256 * 4" for a float a thread')
        todo.append("launch.shared_bytes")
    for a in args:
        if a.local:
            lines += ["", f"# `__local {a.ctype} *{a.name}` is workspace of launch.shared_bytes bytes: kerntune passes it "
                          "where the kernel declares it (no [[arg]] for it)"]
            continue
        lines += ["", "[[arg]]", f'name = "{a.name}"']
        dtype = a.dtype
        if dtype is None:
            lines.append(f'dtype = "TODO"   # `{a.ctype}` has no dtype here: one of {", ".join(DTYPES)}')
            todo.append(f"arg.{a.name}.dtype")
        else:
            lines.append(f'dtype = "{dtype}"')
        if not a.pointer:
            lines.append('role = "scalar"')
            if a.name in problem_names:
                lines.append(f'value = "{a.name}"   # the problem size of the same name')
            else:
                lines.append('value = "TODO"   # a number or an expression over the problem names')
                todo.append(f"arg.{a.name}.value")
            continue
        why = {"input": "const" if a.const else "not const, but nothing writes through it",
               "output": "written before it is read", "inout": "read before it is written"}[a.role]
        lines.append(f'role = "{a.role}"   # {why}')
        if a.packed > 1:
            lines.append(f'shape = ["TODO"]  # in {dtype} elements: {a.packed} per `{a.ctype}`')
        else:
            lines.append('shape = ["TODO"]  # sizes over the problem names, e.g. ["tokens", "d"]')
        todo.append(f"arg.{a.name}.shape")
        if a.name in indices:
            lines += index_range(indices[a.name])
            if not indices[a.name].bound:
                todo.append(f"arg.{a.name}.range")
    for name, ctype, size in (cuda.constants if cuda is not None else ()):
        # a __constant__ array the host fills: an input kerntune fills before each launch
        if name in {a.name for a in args}:
            continue  # an OpenCL twin's `__constant` pointer of that name: one [[arg]] for both
        lines += ["", "[[arg]]", f'name = "{name}"']
        dtype = CTYPES.get(ctype)
        if dtype is None:
            lines.append(f'dtype = "TODO"   # `{ctype}` has no dtype here: one of {", ".join(DTYPES)}')
            todo.append(f"arg.{name}.dtype")
        else:
            lines.append(f'dtype = "{dtype}"')
        lines.append('role = "input"')
        if size.isdigit():
            lines.append(f"shape = [{size}]")
        else:
            lines.append(f'shape = ["TODO"]  # the elements of `__constant__ {ctype} {name}[{size}]`')
            todo.append(f"arg.{name}.shape")
        lines.append("constant = true   # a __constant__ array of the file that the host fills: kerntune fills it "
                     "before each launch")
    lines += ["", "# The sizes to tune for; add a [[problem]] table for each."]
    lines += ["[[problem]]", 'name = "TODO"']
    todo.append("problem")
    for n in problem_names:
        lines.append(f'{n} = "TODO"')
    if not problem_names:
        lines.append('n = "TODO"   # this kernel takes no integer sizes: name the sizes its shapes use')
    lines += [
        "",
        "[cost]",
        'bytes = "TODO"   # bytes the kernel must move: every input read once and every output written once',
        "flops = 0        # arithmetic operations, when they, not memory, bound the kernel",
    ]
    todo.append("cost.bytes")
    return Starter("\n".join(lines) + "\n", sig, tuple(todo))


def found_indices(cuda: KernelSignature | None, opencl: KernelSignature | None) -> dict[str, IndexUse]:
    """Index arrays seen in either dialect; a use whose bound was found wins."""
    out: dict[str, IndexUse] = {}
    for sig in (cuda, opencl):
        for name, use in (index_uses(sig) if sig is not None else {}).items():
            if name not in out or (use.bound and not out[name].bound):
                out[name] = use
    return out


def index_range(use: IndexUse) -> list[str]:
    """An index array's `init` and `range` lines: integers in [0, the size it indexes)."""
    if use.bound:
        return ['init = "randint"', f'range = [0, "{use.bound}"]   # its values index {use.indexes}; {use.why}']
    return ['init = "randint"',
            f'range = [0, "TODO"]   # its values index {use.indexes}: the problem size of its rows, e.g. "vocab"']


def find_todos(data: Any, where: str = "") -> list[str]:
    """Keys whose value is still a TODO string, as dotted paths (arrays of tables by name)."""
    out: list[str] = []
    if isinstance(data, dict):
        for k, v in data.items():
            out += find_todos(v, f"{where}.{k}" if where else k)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            if not isinstance(v, dict):  # a list of values (a shape, a launch): named as a whole
                out += find_todos(v, where)
                continue
            label = v.get("name") if isinstance(v.get("name"), str) else str(i)
            if label.upper().startswith(TODO):
                label = str(i)
            out += find_todos(v, f"{where}.{label}" if where else label)
    elif isinstance(data, str) and data.strip().upper().startswith(TODO):
        out.append(where)
    return out


def check_spec(path: Path) -> str:
    """One line on a spec: every problem found, or that it is ready to tune.

    Beyond the keys still to fill in, the check compiles the kernel (with nvcc when there is one,
    else with the OpenCL compiler), finds the kernel by its name, evaluates every expression at
    every problem size, looks for a verification size no power of two divides, and imports the
    reference and runs it on the smallest problem's inputs. Nothing needs a GPU. Raises
    TemplateError (one line) when the file is not a spec at all."""
    p = path / "kernel.toml" if path.is_dir() else path
    data = read_toml_file(p)
    problems: list[str] = []
    notes: list[str] = []
    todos = list(dict.fromkeys(find_todos(data)))
    if todos:
        problems.append(f"still to fill in: {', '.join(_group(todos))}")
    problems += _compile_problems(p, data)
    notes += _division_notes(data)
    template = None
    if not todos:
        try:
            template = load_template(p)
        except TemplateError as e:
            problems.append(str(e).removeprefix(f"{p}: "))
    if template is not None:
        problems += _expression_problems(template)
        problems += _shared_problems(template)
        if not problems:
            problems += _verification_problems(template)
            problems += _reference_problems(template)
    notes = list(dict.fromkeys(notes))
    tail = f" (note: {'; '.join(notes)})" if notes else ""
    if problems:
        return f"{p}: {'; '.join(problems)}{tail}"
    assert template is not None
    sizes = len(template.problems)
    return (f"{p}: complete: {template.name}, {len(template.arguments)} arguments, {sizes} problem "
            f"size{'s' if sizes != 1 else ''}, {len(template.parameters)} parameters; "
            f"next: kerntune tune {p} --agent rules{tail}")


def _compile_problems(p: Path, data: Mapping) -> list[str]:
    """Compile the kernel's sources at the default configuration: nvcc for CUDA when it is
    installed, else the OpenCL compiler (PoCL on a CPU). The kernel must be found by its name."""
    from .backends import BackendError, CompileError

    kernel = data.get("kernel") if isinstance(data.get("kernel"), dict) else {}
    sources = kernel.get("sources") if isinstance(kernel.get("sources"), dict) else {}
    entry = kernel.get("entry", kernel.get("name"))
    if not isinstance(entry, str) or not entry or entry.upper().startswith(TODO):
        return []
    if "\0" in entry:
        return [f"kernel.entry {entry!r} holds a NUL byte"]
    defines = {}
    for prm in data.get("param", []) if isinstance(data.get("param"), list) else []:
        if isinstance(prm, dict) and isinstance(prm.get("name"), str) and "default" in prm:
            v = prm["default"]
            # only what the compiler can take as -DNAME=value (a NUL byte crashes some in-process)
            if not NAME_RE.match(prm["name"]) or isinstance(v, str) or not isinstance(v, (int, float, bool)):
                return [f"param {prm['name']!r}: a C identifier with a number as its default, to compile"]
            defines[prm["name"]] = "1" if v is True else "0" if v is False else str(v)
    try:  # options as the spec resolves them (include folders made absolute)
        options = dict(spec_options(p, data))
    except TemplateError as e:
        return [str(e).removeprefix(f"{p}: ")]
    out: list[str] = []
    from .backends import cuda as cuda_backend

    for backend, fname in sorted(sources.items()):
        if not isinstance(fname, str) or fname.upper().startswith(TODO):
            continue
        try:
            source = (p.parent / fname).read_text(encoding="utf-8")
        except (OSError, ValueError) as e:  # ValueError: a NUL byte in the name
            out.append(f"cannot read {fname!r}: {getattr(e, 'strerror', None) or e}")
            continue
        try:
            # the source's own folder first, as the engine compiles it (engine/template.py's options_for)
            opts = (f"-I{(p.parent / fname).resolve().parent}", *options.get(backend, ()))
            if backend == "cuda" and cuda_backend.find_nvcc() is not None:
                cuda_backend.compile_cubin(source, entry, defines, opts, "sm_90")
            elif backend == "opencl":
                _opencl().compile(source, entry, defines, opts)
        except CompileError as e:
            out.append(f"{fname} ({backend}): {str(e).splitlines()[0]}")
        except BackendError:
            pass  # no OpenCL device here: nothing to compile with
    return out


_OPENCL = []


def _opencl():
    """One OpenCL backend for the checks of this process."""
    if not _OPENCL:
        from .backends import open_backend

        _OPENCL.append(open_backend("opencl"))
    return _OPENCL[0]


def _division_notes(data: Mapping) -> list[str]:
    """`/` in a launch expression is true division, where a C launcher's `/` is integer division."""
    import ast

    launch = data.get("launch") if isinstance(data.get("launch"), dict) else {}
    out = []
    for key in ("grid", "block", "shared_bytes"):
        values = launch.get(key)
        for i, v in enumerate(values if isinstance(values, list) else [values]):
            if not isinstance(v, str):
                continue
            try:
                tree = ast.parse(v, mode="eval")
            except SyntaxError:
                continue
            if any(isinstance(n, ast.Div) for n in ast.walk(tree)):
                out.append(f"launch.{key} `{v}` divides with `/`, which is exact division here; "
                           "C's integer division is `//`, and `ceil_div(a, b)` covers a tail")
    return out


def _expression_problems(template) -> list[str]:
    """Evaluate what a run will evaluate, at every problem size, so that a mistake shows now."""
    from .inputs import arg_shape
    from .space import geometry

    limits = DeviceLimits(backend="check", name="check")
    out = []
    for problem in template.problems + template.verify_problems:
        try:
            for a in template.arguments:
                if a.is_buffer:
                    arg_shape(a, problem)
            geometry(template, template.default_config(), problem, limits)
            check_values(template, problem)  # scalars that fit their dtype, a finite cost model
        except ExpressionError as e:
            out.append(f"at problem {problem.label()}: {e}")
        except TemplateError as e:
            out.append(str(e).removeprefix(f"{template.spec_path}: "))
    return out


def _shared_problems(template) -> list[str]:
    """A kernel that declares dynamic shared memory (`extern __shared__`, a `__local` pointer
    argument) with no launch.shared_bytes to size it: every launch would run it without any."""
    out = []
    for backend, source in sorted(template.sources.items()):
        try:
            sig = parse_kernel(source, template.entry)
        except TemplateError:
            continue
        if template.shared_bytes is not None:
            if backend == "opencl" and not any(a.local for a in sig.args):  # nothing to take the bytes
                out.append("launch.shared_bytes sizes dynamic local memory, but the opencl kernel has no "
                           "`__local` pointer argument to take it")
            continue
        if sig.dynamic_shared:
            out.append(f"the {backend} kernel declares dynamic shared memory (`{sig.dynamic_shared}`): "
                       "launch.shared_bytes must say how many bytes a block gets")
    return out


def _verification_problems(template) -> list[str]:
    """A verification size that no power of two divides catches a kernel that skips a tail; not
    asked of a kernel whose own launch covers whole blocks only (`N // 16`, as a launcher's
    `n / 16` without a ceiling): its sizes are multiples by design."""
    from .space import whole_blocks_only

    every = template.problems + template.verify_problems
    original = template.original_grid or (template.grid if not template.parameters else ())
    if any(whole_blocks_only(e, pr.values, name) for e in original for pr in every[:1]
           for name in pr.values):  # as the engine decides (space.odd_problem)
        return []
    if any(any(int(v) % 2 for v in pr.values.values() if isinstance(v, int) or float(v).is_integer())
           for pr in every):
        return []
    names = ", ".join(template.problem_names)
    return [f"no odd verification size: add a [[verify.problem]] with odd {names} (it catches a kernel "
            "that skips a tail)"]


REFERENCE_CHECK_BYTES = 1 << 30  # the most the reference's check allocates (or a quarter of the free memory)


def _reference_problems(template) -> list[str]:
    """Import the reference and run it on the smallest problem's inputs."""
    import numpy as np

    from .inputs import arg_shape, make_inputs

    try:
        reference = template.load_reference()
    except TemplateError as e:
        return [str(e)]
    if reference is None:
        return []
    every = template.problems + template.verify_problems

    def size(pr) -> int:  # bytes of its buffers (Python's integers: no shape wraps around)
        try:
            return sum(math.prod(map(int, arg_shape(a, pr))) * DTYPES[a.dtype] for a in template.arguments if a.is_buffer)
        except (ExpressionError, ValueError, OverflowError):
            return 1 << 62

    smallest = min(every, key=size)
    need = size(smallest)
    room = min(REFERENCE_CHECK_BYTES, (available_host_bytes() or REFERENCE_CHECK_BYTES) // 4)
    if need > room:  # drawn before anything is allocated: a check never asks for gigabytes
        return [f"the smallest problem ({smallest.label()}) has {fmt_bytes(need)} of buffers; init --check runs "
                f"the reference only up to {fmt_bytes(room)}: add a smaller [[verify.problem]]"]
    inputs = make_inputs(template, smallest, seed=1)
    given = {**{k: v.copy() for k, v in inputs.host.items()}, **inputs.scalars}
    try:
        with np.errstate(all="ignore"):  # what it computes is judged below, not by numpy's warnings
            got = reference(given, dict(smallest.values))
    except Exception as e:  # the reference is the spec author's code
        return [f"the reference failed at problem {smallest.label()}: {type(e).__name__}: {e}"]
    if not isinstance(got, dict):
        return [f"the reference returned {type(got).__name__}, not a dict of outputs"]
    out = []
    finite = all(np.isfinite(v).all() for v in inputs.host.values() if v.dtype.kind == "f")
    for a in template.arguments:
        if not a.is_output:
            continue
        if a.name not in got:
            out.append(f"the reference returned no `{a.name}`")
            continue
        value = np.asarray(got[a.name])
        want = arg_shape(a, smallest)
        if value.size != int(np.prod(want)):
            out.append(f"the reference's `{a.name}` has {value.size} elements, its shape {list(want)} "
                       f"holds {int(np.prod(want))}")
        elif finite and value.dtype.kind == "f" and not np.isfinite(value.astype(np.float64)).all():
            out.append(f"the reference's `{a.name}` has NaN or Inf from finite inputs at problem {smallest.label()}")
    return out


def _group(todos: list[str]) -> list[str]:
    """`problem.0.tokens, problem.0.d` read better as `problem sizes (tokens, d)`."""
    out: list[str] = []
    sizes = [t.split(".")[-1] for t in todos if t.startswith("problem.") and t.count(".") == 2
             and t.split(".")[-1] != "name"]
    shapes = [t.split(".")[1] for t in todos if t.startswith("arg.") and t.endswith(".shape")]
    for t in todos:
        if t.startswith("problem.") and (t.split(".")[-1] in sizes or t.endswith(".name")):
            continue
        if t.startswith("arg.") and t.endswith(".shape"):
            continue
        out.append(t)
    if any(t.startswith("problem.") for t in todos):
        out.insert(0, f"problem sizes ({', '.join(dict.fromkeys(sizes))})" if sizes else "problem name")
    if shapes:
        out.append(f"arg shapes ({', '.join(shapes)})")
    return out
