"""`kerntune init`: a starting kernel.toml from a kernel's signature, and the check of a filled-in one.

What the signature tells is written out: the kernel's name, its sources, every argument with its
dtype and role (const pointers are inputs, pointers the body writes are outputs, or inouts when it
reads them too), and integer scalars as problem sizes of the same name. What only the user knows
is left as a "TODO" string — problem sizes, buffer shapes, launch geometry, the bytes the kernel
must move — which `check_spec` finds and names in one line.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .device import DeviceLimits
from .expressions import ExpressionError
from .signature import INTEGER_DTYPES, KernelArg, KernelSignature, SignatureError, parse_kernel
from .template import DTYPES, TemplateError, load_template

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TODO = "TODO"


@dataclass(frozen=True)
class Starter:
    """A starting spec: its text, the kernel it describes, and what is left to fill in."""

    text: str
    signature: KernelSignature
    todo: tuple[str, ...]


def read_kernel(path: Path, entry: str | None = None) -> KernelSignature:
    """The kernel in a source file; SignatureError (one line) when there is none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SignatureError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SignatureError(f"{path}: cannot read: {e}") from None
    return parse_kernel(text, entry, str(path))


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
    lines = [
        f"# kernel.toml for {sig.name}, written by `kerntune init`{f' from {origin}' if origin else ''}.",
        '# Fill in every "TODO", then run `kerntune init --check` on this file. Nothing here is run as',
        "# code: expressions are arithmetic over the problem names (and parameters, once there are any).",
        "",
        "[kernel]",
        f'name = "{sig.name}"',
        'description = ""',
        f'entry = "{sig.name}"',
        "sources = { " + ", ".join(f'{b} = "{f}"' for b, f in sorted(sources.items())) + " }",
        "",
        "# The original kernel's own launch, over the problem names"
        + (f" ({', '.join(problem_names)})." if problem_names else "."),
        "[launch]",
        'grid = ["TODO"]   # blocks (work-groups), e.g. "ceil_div(n, 256)" or "tokens"',
    ]
    todo.append("launch.grid")
    hint = cuda.block_hint if cuda is not None and cuda.block_hint else (opencl.block_hint if opencl else ())
    if hint:
        dims = [d for d in hint]
        while len(dims) > 1 and dims[-1] == 1:
            dims.pop()
        lines.append(f"block = {dims}   # threads per block, from the kernel's launch bounds")
    else:
        lines.append('block = ["TODO"]  # threads per block (work-group size), e.g. 256')
        todo.append("launch.block")
    for a in args:
        lines += ["", "[[arg]]", f'name = "{a.name}"']
        dtype = a.dtype
        if a.local:
            lines.append(f'dtype = "TODO"   # `__local {a.ctype} *` is workspace: declare it through '
                         "launch.shared_bytes instead, and remove this argument")
            todo.append(f"arg.{a.name}")
            continue
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
               "output": "written, never read", "inout": "written and read"}[a.role]
        lines.append(f'role = "{a.role}"   # {why}')
        lines.append('shape = ["TODO"]  # sizes over the problem names, e.g. ["tokens", "d"]')
        todo.append(f"arg.{a.name}.shape")
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
    """One line on a filled-in spec: what is still missing, or that it is ready to tune.

    Raises TemplateError (one line) when the spec is complete but wrong."""
    p = path / "kernel.toml" if path.is_dir() else path
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TemplateError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TemplateError(f"{p}: cannot read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise TemplateError(f"{p}: not valid TOML: {e}") from None
    todos = list(dict.fromkeys(find_todos(data)))
    if todos:
        return f"{p}: still to fill in: {', '.join(_group(todos))}"
    template = load_template(p)
    # evaluate what a run will evaluate, at every problem size, so that a mistake shows now
    from .evaluate import arg_shape
    from .space import geometry

    limits = DeviceLimits(backend="check", name="check")
    for problem in template.problems + template.verify_problems:
        try:
            for a in template.arguments:
                if a.is_buffer:
                    arg_shape(a, problem)
            geometry(template, template.default_config(), problem, limits)
            template.cost_bytes.evaluate(problem.values)
        except ExpressionError as e:
            raise TemplateError(f"{p}: at problem {problem.label()}: {e}") from None
    sizes = len(template.problems)
    return (f"{p}: complete: {template.name}, {len(template.arguments)} arguments, {sizes} problem "
            f"size{'s' if sizes != 1 else ''}, {len(template.parameters)} parameters; "
            f"next: kerntune tune {p} --agent rules")


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
