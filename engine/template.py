"""Templates: kernel source plus a `kernel.toml` spec.

The spec names the parameters (values and default), the constraints between them, the launch
geometry, the kernel's arguments (dtype, shape, role), the problem sizes to tune for, and a cost
model. Parameters reach the source as preprocessor defines; the source keeps `#ifndef NAME` /
`#define NAME default` so that it compiles alone as the default configuration. The original kernel
(what a template was made from, measured first) may be a file of its own: the spec names it
`[kernel] original`, and its own launch `[launch] original_grid` / `original_block`; the keys
earlier specs wrote for them (`baseline`, `baseline_grid`, `baseline_block`) are read alike.

Every spec error is a `TemplateError` whose message is one line naming the file, the key and what
was expected.
"""

from __future__ import annotations

import contextvars
import hashlib
import importlib.util
import math
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .cxx import includes
from .dtypes import DTYPES, FLOAT_DTYPES, np_dtype  # noqa: F401  (np_dtype: callers take it from here too)
from .expressions import Expression, ExpressionError, parse

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

BACKENDS = ("cuda", "opencl")
ROLES = ("input", "output", "inout", "scalar")
INITS = ("normal", "uniform", "randint", "positive")
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SPEC_BYTES = 1 << 20  # the most a spec (kernel.toml) may hold: a page of TOML, generously
SOURCE_BYTES = 8 << 20  # the most a kernel source, or a header it includes, may hold
INCLUDE_DEPTH = 16  # headers including headers, as deep as they are followed
# Names that expressions may use to reach the device's limits (see engine/space.py).
DEVICE_NAMES = (
    "max_threads_per_block",
    "max_shared_per_block",
    "max_shared_per_block_optin",
    "warp_size",
    "sm_count",
    "max_regs_per_block",
    "max_cluster_blocks",
)

ParamValue = int | float | bool


class TemplateError(ValueError):
    """A template spec or source that cannot be used; the message is one line."""


@dataclass(frozen=True)
class Parameter:
    """One tunable parameter, passed to the source as a preprocessor define."""

    name: str
    values: tuple[ParamValue, ...]
    default: ParamValue
    description: str = ""
    # what it tunes, as a word of PARAM_KINDS (the tuner orders and spreads its values by it);
    # "" where the spec does not say, when the tuner goes by the name
    kind: str = ""


# The kinds of parameter a spec's `kind` may name.
PARAM_KINDS = ("threads", "lanes", "rows", "vector", "work", "grid", "bounds", "flag", "unroll", "tile", "keep",
               "chains", "size")


@dataclass(frozen=True)
class Constraint:
    """A boolean expression every configuration must satisfy."""

    text: str
    expr: Expression


@dataclass(frozen=True)
class Argument:
    """A kernel argument: a buffer with dtype, shape and role, or a scalar with a value."""

    name: str
    dtype: str
    role: str
    shape: tuple[Expression, ...] = ()
    value: Expression | None = None
    init: str = "normal"
    low: float = -1.0
    high: float = 1.0
    rtol: float | None = None
    atol: float | None = None
    inf_fraction: float = 0.0  # share of random inputs set to -inf (log-sum-exps of empty rows)
    # `range` bounds written as expressions over the problem sizes (token ids in [0, vocab))
    range_exprs: tuple[Expression, Expression] | None = None
    # the reference may hold NaN or Inf for this output although the inputs are finite
    nonfinite_ok: bool = False
    # an input in constant memory: CUDA a `__constant__` array of the file by this name, filled
    # before each launch (no kernel argument); OpenCL a `__constant` pointer argument
    constant: bool = False

    def bounds(self, values: Mapping[str, Any]) -> tuple[float, float]:
        """The range inputs are drawn from, at a problem's sizes."""
        if self.range_exprs is None:
            return self.low, self.high
        lo, hi = (float(e.evaluate(values)) for e in self.range_exprs)
        if not lo < hi:
            raise ExpressionError(f"the range of `{self.name}` is empty at {dict(values)}: [{lo:g}, {hi:g})")
        return lo, hi

    @property
    def is_buffer(self) -> bool:
        return self.role != "scalar"

    @property
    def is_output(self) -> bool:
        return self.role in ("output", "inout")


@dataclass(frozen=True)
class Problem:
    """A named problem size: values for the problem's names (tokens, d, n, ...)."""

    name: str
    values: Mapping[str, int]

    def label(self) -> str:
        return self.name or ",".join(f"{k}={v}" for k, v in self.values.items())


@dataclass(frozen=True)
class Template:
    """A parameterised kernel: sources per backend and the parsed spec."""

    name: str
    description: str
    directory: Path
    spec_path: Path
    spec_text: str
    entry: str
    sources: Mapping[str, str]
    parameters: tuple[Parameter, ...]
    constraints: tuple[Constraint, ...]
    grid: tuple[Expression, ...]
    block: tuple[Expression, ...]
    shared_bytes: Expression | None
    arguments: tuple[Argument, ...]
    problems: tuple[Problem, ...]
    verify_problems: tuple[Problem, ...]
    cost_bytes: Expression
    cost_flops: Expression
    original_grid: tuple[Expression, ...] = ()  # the original kernel's own launch (problem names only)
    original_block: tuple[Expression, ...] = ()
    reference_path: Path | None = None
    reference_function: str = "reference"
    reference_timeout: float = 120.0  # seconds one call of the reference (or its import) may take
    original_sources: Mapping[str, str] = field(default_factory=dict)
    forbid_spills: bool = False
    compile_options: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # names of `[[problem]]` entries the kernel serves (a prefill and a decode size, say): tuned
    # each, then one general configuration chosen across them (engine/campaign.py)
    serves: tuple[str, ...] = ()
    # each backend's source folder (absolute): searched first for the source's `#include "..."`
    source_folders: Mapping[str, str] = field(default_factory=dict)

    def options_for(self, backend: str) -> tuple[str, ...]:
        """The compiler options a backend's source is built with: its own folder as the first
        include folder (the compile runs elsewhere, from a string), then the spec's options."""
        own = self.source_folders.get(backend)
        return tuple(dict.fromkeys(((f"-I{own}",) if own else ()) + tuple(self.compile_options.get(backend, ()))))

    @property
    def problem_names(self) -> tuple[str, ...]:
        return tuple(self.problems[0].values) if self.problems else ()

    def default_config(self) -> dict[str, ParamValue]:
        return {p.name: p.default for p in self.parameters}

    def parameter(self, name: str) -> Parameter:
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)

    def problem(self, name: str | None = None, overrides: Mapping[str, int] | None = None) -> Problem:
        """The named problem (the first when None), with `overrides` applied to its values."""
        base = self.problems[0]
        if name is not None:
            matches = [p for p in self.problems if p.name == name]
            if not matches:
                known = ", ".join(p.name for p in self.problems)
                raise TemplateError(f"{self.spec_path}: no problem named {name!r} (known: {known})")
            base = matches[0]
        if not overrides:
            return base
        unknown = set(overrides) - set(base.values)
        if unknown:
            raise TemplateError(
                f"{self.spec_path}: unknown problem name(s) {', '.join(sorted(unknown))}; "
                f"this template's are {', '.join(base.values)}"
            )
        values = {**base.values, **overrides}
        return Problem(",".join(f"{k}={v}" for k, v in values.items()), values)

    def source_for(self, backend: str) -> str:
        try:
            return self.sources[backend]
        except KeyError:
            raise TemplateError(
                f"{self.spec_path}: template {self.name!r} has no source for the {backend} backend"
            ) from None

    def fingerprint(self) -> str:
        """A hash of the spec and every source: a session resumes only on the same template."""
        h = hashlib.sha256(self.spec_text.encode())
        for k in sorted(self.sources):
            h.update(k.encode())
            h.update(self.sources[k].encode())
        return h.hexdigest()[:16]

    def load_reference(self) -> Callable[..., dict] | None:
        """Import the template's numpy reference (the template author's own Python file)."""
        if self.reference_path is None:
            return None
        modname = f"kerntune_reference_{self.name}_{abs(hash(str(self.reference_path)))}"
        spec = importlib.util.spec_from_file_location(modname, self.reference_path)
        if spec is None or spec.loader is None:
            raise TemplateError(f"{self.spec_path}: cannot load reference {self.reference_path}")
        module = importlib.util.module_from_spec(spec)
        seconds = self.reference_timeout
        try:
            time_limited(spec.loader.exec_module, seconds, f"{self.reference_path}: importing the reference")(module)
        except ReferenceTimeout:
            raise
        except Exception as e:  # the reference is the template author's code
            raise TemplateError(f"{self.reference_path}: reference failed to import: {e}") from None
        fn = getattr(module, self.reference_function, None)
        if not callable(fn):
            raise TemplateError(
                f"{self.reference_path}: expected a function named {self.reference_function!r}"
            )
        from .inputs_cache import cached_reference  # within a run that asks: each input set's outputs once

        fn = time_limited(fn, seconds, f"{self.reference_path}: the reference")
        return cached_reference(fn, self.reference_path, self.reference_function)


class ReferenceTimeout(TemplateError):
    """The spec's reference (or its import) ran past the spec's `reference_timeout`."""


# the calls of a reference that ran past their time limit, each still running in its thread
_ABANDONED: list[threading.Thread] = []


def stray_references() -> int:
    """How many reference calls that ran past their time limit are still running in this process.
    A run's worker ends once it has answered when there are any (engine/worker.py): the process's
    end is what stops them."""
    _ABANDONED[:] = [t for t in _ABANDONED if t.is_alive()]
    return len(_ABANDONED)


def time_limited(fn: Callable[..., Any], seconds: float, what: str) -> Callable[..., Any]:
    """`fn`, but a call that has not returned after `seconds` raises ReferenceTimeout. The call
    runs in a thread of its own (numpy lets go of the interpreter in its loops, so it runs as
    fast); one that never returns is left to the process's end (`stray_references` counts
    them), which a run's worker reaches once it has answered (it reports the error and is
    stopped, a new one takes the next request), and the command line too."""
    def call(*args: Any, **kwargs: Any) -> Any:
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = fn(*args, **kwargs)
            except BaseException as e:  # noqa: B036 (handed to the caller as it is)
                box["error"] = e

        # the caller's context goes with the call (numpy's errstate, say, is kept in it)
        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(run,), name="kerntune-reference", daemon=True)
        thread.start()
        thread.join(seconds)
        if thread.is_alive():
            _ABANDONED.append(thread)
            raise ReferenceTimeout(f"{what} did not return within {seconds:g} s (the spec's "
                                   "[kernel] reference_timeout)")
        if "error" in box:
            raise box["error"]
        return box["value"]

    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


class _Spec:
    """Typed access to the parsed TOML with one-line errors naming file and key."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, expected: str, got: Any = None) -> TemplateError:
        tail = "" if got is None else f", got {_describe(got)}"
        return TemplateError(f"{self.path}: [{key}] expected {expected}{tail}")

    def table(self, data: Mapping, key: str, where: str, required: bool = True) -> dict:
        if key not in data:
            if required:
                raise self.fail(_join(where, key), "a table")
            return {}
        v = data[key]
        if not isinstance(v, dict):
            raise self.fail(_join(where, key), "a table", v)
        return v

    def string(self, data: Mapping, key: str, where: str, default: str | None = None) -> str:
        if key not in data:
            if default is None:
                raise self.fail(_join(where, key), "a string")
            return default
        v = data[key]
        if not isinstance(v, str):
            raise self.fail(_join(where, key), "a string", v)
        return v

    def expr(self, value: Any, key: str) -> Expression:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise self.fail(key, "an expression (string or number)", value)
        try:
            return parse(value)
        except ExpressionError as e:
            raise self.fail(key, f"a valid expression ({e})") from None

    def check_keys(self, data: Mapping, allowed: set[str], where: str) -> None:
        for k in data:
            if k not in allowed:
                raise self.fail(
                    _join(where, k), f"one of the known keys ({', '.join(sorted(allowed))})", k
                )


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _describe(v: Any) -> str:
    try:
        text = repr(v)
    except RecursionError:
        text = "(nested too deeply to show)"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(v).__name__} {text}"


def load_template(path: str | Path) -> Template:
    """Load a template from a `kernel.toml` path or the folder holding one."""
    p = Path(path)
    if p.is_dir():
        p = p / "kernel.toml"
    return parse_template(read_text_file(p), p)


def parse_template(text: str, path: Path, sources: Mapping[str, str] | None = None) -> Template:
    """Parse spec text; sources are read beside `path` unless given."""
    s = _Spec(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TemplateError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:
        raise TemplateError(f"{path}: not valid TOML: nested too deeply") from None
    s.check_keys(
        data,
        {"kernel", "param", "constraints", "launch", "arg", "problem", "verify", "cost", "serves"},
        "",
    )
    kernel = s.table(data, "kernel", "")
    s.check_keys(
        kernel,
        {"name", "description", "entry", "sources", "original", "baseline", "reference", "forbid_spills", "options",
         "absolute_includes", "reference_timeout"},
        "kernel",
    )
    name = s.string(kernel, "name", "kernel")
    if not NAME_RE.match(name):
        raise s.fail("kernel.name", "a name of letters, digits and _", name)
    description = s.string(kernel, "description", "kernel", "")
    entry = s.string(kernel, "entry", "kernel", name)
    if not _entry_name(entry):
        raise s.fail("kernel.entry", "a kernel name: `k`, `ns::k` or an instantiation `k<float, 4>`", entry)

    directory = path.parent
    source_files = s.table(kernel, "sources", "kernel")
    if not source_files:
        raise s.fail("kernel.sources", "at least one of cuda, opencl")
    loaded: dict[str, str] = {}
    folders: dict[str, Path] = {}  # each source's own folder: searched first for its #include "..."
    for backend, fname in source_files.items():
        if backend not in BACKENDS:
            raise s.fail(f"kernel.sources.{backend}", f"a backend name ({', '.join(BACKENDS)})", backend)
        if not isinstance(fname, str):
            raise s.fail(f"kernel.sources.{backend}", "a file name", fname)
        folders[backend] = _beside(s, directory, fname, f"kernel.sources.{backend}").parent.resolve()
        if sources is not None and backend in sources:
            loaded[backend] = sources[backend]
            continue
        loaded[backend] = _read_beside(s, directory, fname, f"kernel.sources.{backend}")
    originals: dict[str, str] = {}
    okey = _written_key(s, kernel, "original", "kernel")  # the original kernel's files
    original_files = kernel.get(okey, {})
    if not isinstance(original_files, dict):
        raise s.fail(f"kernel.{okey}", "a table of backend = file", original_files)
    for backend, fname in original_files.items():
        if backend not in BACKENDS or not isinstance(fname, str):
            raise s.fail(f"kernel.{okey}.{backend}", "backend = file name", fname)
        originals[backend] = _read_beside(s, directory, fname, f"kernel.{okey}.{backend}")

    options: dict[str, tuple[str, ...]] = {}
    raw_opts = kernel.get("options", {})
    if not isinstance(raw_opts, dict):
        raise s.fail("kernel.options", "a table of backend = [options]", raw_opts)
    absolute_includes = kernel.get("absolute_includes", False)
    if not isinstance(absolute_includes, bool):
        raise s.fail("kernel.absolute_includes", "true or false", absolute_includes)
    for backend, opts in raw_opts.items():
        if backend not in BACKENDS or not isinstance(opts, list) or not all(isinstance(o, str) for o in opts):
            raise s.fail(f"kernel.options.{backend}", "a list of compiler flags such as \"-O3\"", opts)
        options[backend] = tuple(_option(s, directory, o, f"kernel.options.{backend}", absolute_includes)
                                 for o in opts)

    if sources is None:  # what the compiler would read besides the sources: never outside the folders
        roots = [directory.resolve(), *(Path(o[2:]) for opts in options.values() for o in opts if o.startswith("-I"))]
        for table, files, texts in (("sources", source_files, loaded), (okey, original_files, originals)):
            for backend, fname in files.items():
                _check_includes(s, texts[backend], [(directory / fname).resolve().parent, *roots[1:]], roots,
                                absolute_includes, f"kernel.{table}.{backend}")

    forbid_spills = kernel.get("forbid_spills", False)
    if not isinstance(forbid_spills, bool):
        raise s.fail("kernel.forbid_spills", "true or false", forbid_spills)

    reference_timeout = kernel.get("reference_timeout", 120.0)
    if (isinstance(reference_timeout, bool) or not isinstance(reference_timeout, (int, float))
            or not 0 < reference_timeout <= 86400):
        raise s.fail("kernel.reference_timeout", "seconds, more than 0 and at most a day", reference_timeout)
    reference_path: Path | None = None
    reference_fn = "reference"
    if "reference" in kernel:
        ref = s.string(kernel, "reference", "kernel")
        file_part, _, fn_part = ref.partition(":")
        reference_fn = fn_part or "reference"
        if not NAME_RE.match(reference_fn):
            raise s.fail("kernel.reference", "file.py or file.py:function", ref)
        # the reference is imported as Python: it comes from the spec's own folder, like the sources
        reference_path = _beside(s, directory, file_part, "kernel.reference").resolve()
        if not reference_path.is_file():
            raise s.fail("kernel.reference", f"an existing file beside the spec ({file_part} not found)")

    # problems first: their names are what the other expressions may use
    raw_problems = data.get("problem")
    if not isinstance(raw_problems, list) or not raw_problems:
        raise s.fail("problem", "at least one [[problem]] table with a name and sizes", raw_problems)
    problems = _problems(s, raw_problems, "problem")
    problem_names = set(problems[0].values)
    serves = _serves(s, data.get("serves", []), problems)
    verify_problems: tuple[Problem, ...] = ()
    if "verify" in data:
        verify = s.table(data, "verify", "")
        s.check_keys(verify, {"problem"}, "verify")
        raw = verify.get("problem", [])
        if not isinstance(raw, list):
            raise s.fail("verify.problem", "a list of [[verify.problem]] tables", raw)
        verify_problems = _problems(s, raw, "verify.problem", problem_names)

    params = _parameters(s, data.get("param", []))
    param_names = {p.name for p in params}
    clash = param_names & problem_names
    if clash:
        raise s.fail("param", f"names distinct from the problem's ({', '.join(sorted(clash))} used by both)")
    known = param_names | problem_names | set(DEVICE_NAMES)

    def checked(value: Any, key: str, allowed: set[str] = known) -> Expression:
        e = s.expr(value, key)
        unknown = e.names - allowed
        if unknown:
            raise s.fail(key, f"only known names, not {', '.join(sorted(unknown))}")
        return e

    raw_constraints = data.get("constraints", [])
    if not isinstance(raw_constraints, list):
        raise s.fail("constraints", "a list of expression strings", raw_constraints)
    constraints = tuple(
        Constraint(str(c).strip(), checked(c, f"constraints[{i}]")) for i, c in enumerate(raw_constraints)
    )

    launch = s.table(data, "launch", "")
    s.check_keys(launch, {"grid", "block", "shared_bytes", "original_grid", "original_block", "baseline_grid",
                          "baseline_block"}, "launch")
    grid = _dims(s, launch, "grid", checked)
    block = _dims(s, launch, "block", checked)
    # The original kernel's own launch (its block size may follow the row length).
    original_grid = original_block = ()
    gkey, bkey = (_written_key(s, launch, k, "launch") for k in ("original_grid", "original_block"))
    if gkey in launch or bkey in launch:
        only_problem = lambda v, k: checked(v, k, problem_names)  # noqa: E731
        original_grid = _dims(s, launch, gkey, only_problem)
        original_block = _dims(s, launch, bkey, only_problem)
    shared = checked(launch["shared_bytes"], "launch.shared_bytes") if "shared_bytes" in launch else None

    arguments = _arguments(s, data.get("arg"), checked, problem_names)

    cost = s.table(data, "cost", "")
    s.check_keys(cost, {"bytes", "flops"}, "cost")
    if "bytes" not in cost:
        raise s.fail("cost.bytes", "an expression for the bytes the kernel must move")
    cost_bytes = checked(cost["bytes"], "cost.bytes", problem_names)
    cost_flops = checked(cost.get("flops", 0), "cost.flops", problem_names)

    for backend, src in loaded.items():
        for p in params:
            if not re.search(rf"\b{re.escape(p.name)}\b", src):
                raise s.fail(
                    f"param.{p.name}", f"a parameter the {backend} source uses (it never mentions {p.name})"
                )
        plain = entry.split("<")[0].split("::")[-1].strip()  # `ns::k<float, 4>` is written `k` in its source
        if not re.search(rf"\b{re.escape(plain)}\b", src):
            raise s.fail("kernel.entry", f"a function in the {backend} source ({entry} not found)")

    return Template(
        name=name,
        description=description,
        directory=directory,
        spec_path=path,
        spec_text=text,
        entry=entry,
        sources=loaded,
        parameters=params,
        constraints=constraints,
        grid=grid,
        block=block,
        shared_bytes=shared,
        arguments=arguments,
        problems=problems,
        verify_problems=verify_problems,
        cost_bytes=cost_bytes,
        cost_flops=cost_flops,
        original_grid=original_grid,
        original_block=original_block,
        reference_path=reference_path,
        reference_function=reference_fn,
        reference_timeout=float(reference_timeout),
        original_sources=originals,
        forbid_spills=forbid_spills,
        compile_options=options,
        serves=serves,
        source_folders={b: str(f) for b, f in folders.items()},
    )


def _entry_name(entry: str) -> bool:
    """`k`, `ns::k`, `k<float, 4>`: names separated by ::, then template arguments in balanced <>."""
    name, _, targs = entry.partition("<")
    if not all(NAME_RE.match(part) for part in name.strip().removeprefix("::").split("::")):
        return False
    if not targs:
        return True
    depth = 1
    for c in targs:
        if not (c.isalnum() or c in "_ ,:*&()-.<>"):
            return False
        depth += {"<": 1, ">": -1}.get(c, 0)
        if depth < 0:
            return False
    return depth == 0 and targs.rstrip().endswith(">")


def _option(s: _Spec, directory: Path, opt: str, key: str, absolute_ok: bool) -> str:
    """A compiler flag; `-IPATH` is an include folder inside the spec's folder (made absolute), or
    an absolute folder anywhere when the spec says `absolute_includes = true`."""
    if opt.startswith("-I") and len(opt) > 2:
        path = Path(opt[2:])
        if path.is_absolute():
            if not absolute_ok:
                raise s.fail(key, "include folders inside the spec's folder (an absolute -I path needs "
                                  "absolute_includes = true in [kernel])", opt)
            return f"-I{path}"
        where = (directory / path).resolve()
        if not where.is_relative_to(directory.resolve()):
            raise s.fail(key, "include folders inside the spec's folder", opt)
        if not where.is_dir():
            raise s.fail(key, f"an existing folder ({opt[2:]} not found beside the spec)", opt)
        return f"-I{where}"
    if not re.match(r"^-[A-Za-z0-9_=.,+-]+$", opt):
        raise s.fail(key, "a list of compiler flags such as \"-O3\"", opt)
    if opt.startswith(_FOLDER_OPTIONS):
        raise s.fail(key, "include folders written -IDIR, inside the spec's folder", opt)
    if opt.split("=", 1)[0] in _FILE_OPTIONS or ".." in opt:
        raise s.fail(key, "compiler flags that name no file or folder (include folders: -IDIR)", opt)
    return opt


# Compiler options (nvcc's, clang's, OpenCL's) that name an include folder some other way than
# -I, or a file to read, write or run: a spec's options never reach outside its folder.
_FOLDER_OPTIONS = ("--include-path", "-isystem", "--system-include", "-iquote", "-idirafter", "-iprefix",
                   "-iwithprefix", "-isysroot", "--sysroot", "-cl-include")
_FILE_OPTIONS = {"-include", "--pre-include", "-imacros", "-optf", "--options-file", "-o", "--output-file", "-odir",
                 "--output-directory", "-MF", "--dependency-output", "--keep-dir", "-ccbin", "--compiler-bindir",
                 "-L", "--library-path", "-l", "--library", "-Xcompiler", "--compiler-options", "-Xlinker",
                 "--linker-options", "-keep", "--keep", "-save-temps", "--save-temps", "-M", "-MM", "-MD", "-MMD",
                 "--generate-dependencies", "-Xptxas=--output-file"}


def spec_options(p: Path, data: Mapping) -> Mapping[str, tuple[str, ...]]:
    """A parsed spec's compiler options by backend, checked as `load_template` checks them (the
    options that are not strings, and backends whose options are not a list, left out)."""
    kernel = data.get("kernel") if isinstance(data.get("kernel"), dict) else {}
    raw = kernel.get("options", {})
    absolute = kernel.get("absolute_includes", False) is True
    if not isinstance(raw, dict):
        return {}
    s = _Spec(p)
    return {b: tuple(_option(s, p.parent, o, f"kernel.options.{b}", absolute) for o in opts if isinstance(o, str))
            for b, opts in raw.items() if isinstance(opts, list)}


def _beside(s: _Spec, directory: Path, fname: str, key: str) -> Path:
    """A file the spec names: in the spec's folder or below it, never an absolute path or `..`."""
    if not fname or "\0" in fname or Path(fname).is_absolute() or ".." in Path(fname).parts:
        raise s.fail(key, "a file name beside the spec", fname)
    path = directory / fname
    try:
        inside = path.resolve().is_relative_to(directory.resolve())
    except (OSError, RuntimeError):  # a loop of links
        inside = False
    if not inside:  # a symbolic link (of the file or a folder on the way) out of the spec's folder
        raise s.fail(key, "a file in the spec's folder (a link out of it is not followed)", fname)
    return path


def _check_includes(s: _Spec, source: str, search: list[Path], roots: list[Path], absolute_ok: bool, key: str,
                    depth: int = INCLUDE_DEPTH, seen: set[Path] | None = None) -> None:
    """Every file the source includes, looked for as the compiler looks (a quoted name in the
    including file's folder first, then the include folders), and what those include in turn,
    is inside the spec's folder or one of its include folders (`roots`). An absolute path, a
    `..` out of them, a link out of them or a name a macro gives needs `absolute_includes`."""
    if absolute_ok:
        return
    seen = set() if seen is None else seen
    need = "absolute_includes = true in [kernel]"
    for kind, name in includes(source):
        if kind == "computed":
            raise s.fail(key, f"includes by name (an `#include` of a macro needs {need})", name)
        wanted = Path(name)
        if wanted.is_absolute() or "\0" in name:
            raise s.fail(key, f"includes inside the spec's folder (an `#include` of an absolute path needs {need})", name)
        hit = find_include(kind, name, search[0], roots[1:])
        try:
            real = hit[0].resolve() if hit is not None else None
        except (OSError, RuntimeError):  # a loop of links
            real = None
        if real is None:
            if ".." in wanted.parts:  # not beside: the compiler's own search would climb out of its folders
                raise s.fail(key, f"includes inside the spec's folder (a `..` out of it needs {need})", name)
            continue
        if not any(real.is_relative_to(r) for r in roots):
            raise s.fail(key, f"includes inside the spec's folder or its -I folders ({need} lets it out)", name)
        if real not in seen and depth > 0 and real.stat().st_size <= SOURCE_BYTES:
            seen.add(real)
            text = real.read_text(encoding="utf-8", errors="replace")
            _check_includes(s, text, [real.parent, *search[1:]], roots, absolute_ok, key, depth - 1, seen)


def find_include(kind: str, name: str, here: Path, folders: Sequence[Path]) -> tuple[Path, int | None] | None:
    """Where the compiler finds the `#include` of `name` in a file of folder `here`: a quoted name
    beside that file first, then in the include `folders` in order; an angled name in `folders`
    only. (the file, the index of the folder it was found in, or None where beside), else None
    (a system header, or a file the compiler would not find either)."""
    places = ([(here, None)] if kind == "quoted" else []) + [(f, i) for i, f in enumerate(folders)]
    for folder, index in places:
        try:
            found = folder / name
            if found.is_file():
                return found, index
        except (OSError, ValueError):
            continue
    return None


def _read_beside(s: _Spec, directory: Path, fname: str, key: str) -> str:
    path = _beside(s, directory, fname, key)
    try:
        size = path.stat().st_size
        if size > SOURCE_BYTES:
            raise s.fail(key, f"a source of at most {SOURCE_BYTES >> 20} MiB ({fname} holds {size} bytes)")
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise s.fail(key, f"an existing file beside the spec ({fname} not found)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise s.fail(key, f"a readable text file ({e})") from None


def _problems(s: _Spec, raw: list, key: str, names: set[str] | None = None) -> tuple[Problem, ...]:
    out: list[Problem] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = f"{key}[{i}]"
        if not isinstance(item, dict):
            raise s.fail(where, "a table with a name and integer sizes", item)
        pname = item.get("name", "")
        if not isinstance(pname, str):
            raise s.fail(f"{where}.name", "a string", pname)
        values: dict[str, int] = {}
        for k, v in item.items():
            if k == "name":
                continue
            if not NAME_RE.match(k):
                raise s.fail(f"{where}.{k}", "a size name of letters, digits and _", k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise s.fail(f"{where}.{k}", "a non-negative integer", v)
            values[k] = v
        if not values:
            raise s.fail(where, "at least one size, such as n = 1024")
        expected = names if names is not None else (set(out[0].values) if out else None)
        if expected is not None and set(values) != expected:
            raise s.fail(where, f"the same size names as the others ({', '.join(sorted(expected))})", item)
        if pname in seen:
            raise s.fail(f"{where}.name", "a name used once", pname)
        if pname:
            seen.add(pname)
        out.append(Problem(pname, values))
    return tuple(out)


def _serves(s: _Spec, raw: Any, problems: tuple[Problem, ...]) -> tuple[str, ...]:
    """`serves = ["prefill", "decode"]`: distinct names of the spec's own `[[problem]]` entries."""
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        raise s.fail("serves", "a list of [[problem]] names, such as [\"prefill\", \"decode\"]", raw)
    known = [p.name for p in problems if p.name]
    for name in raw:
        if name not in known:
            raise s.fail("serves", f"names of [[problem]] entries ({', '.join(known) or 'none has a name'})", name)
    if len(set(raw)) != len(raw):
        raise s.fail("serves", "each problem named once", raw)
    return tuple(raw)


def _named_table(s: _Spec, table: str, i: int, item: Any, keys: set[str], seen: set[str]) -> tuple[str, str]:
    """Check one [[param]] or [[arg]] table's shape and name; (name, its key for messages)."""
    where = f"{table}[{i}]"
    if not isinstance(item, dict):
        raise s.fail(where, "a table with a name", item)
    s.check_keys(item, keys, where)
    name = s.string(item, "name", where)
    if not NAME_RE.match(name):
        raise s.fail(f"{where}.name", "a C identifier", name)
    if name in seen:
        raise s.fail(f"{table}.{name}", "a name declared once")
    seen.add(name)
    return name, f"{table}.{name}"


def _parameters(s: _Spec, raw: Any) -> tuple[Parameter, ...]:
    if not isinstance(raw, list):
        raise s.fail("param", "a list of [[param]] tables", raw)
    out: list[Parameter] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        name, where = _named_table(s, "param", i, item, {"name", "values", "default", "description", "kind"}, seen)
        values = item.get("values")
        if not isinstance(values, list) or not values:
            raise s.fail(f"{where}.values", "a non-empty list of numbers or booleans", values)
        for v in values:
            if not isinstance(v, (int, float, bool)) or (isinstance(v, float) and not math.isfinite(v)):
                raise s.fail(f"{where}.values", "finite numbers or booleans only", v)
        if len(set(values)) != len(values):
            raise s.fail(f"{where}.values", "distinct values", values)
        if "default" not in item:
            raise s.fail(f"{where}.default", "the value that reproduces the original kernel")
        default = item["default"]
        if default not in values or type(default) is not type(values[values.index(default)]):
            raise s.fail(f"{where}.default", "one of its values", default)
        description = s.string(item, "description", where, "")
        kind = s.string(item, "kind", where, "")
        if kind and kind not in PARAM_KINDS:
            raise s.fail(f"{where}.kind", f"one of {', '.join(PARAM_KINDS)}", kind)
        out.append(Parameter(name, tuple(values), default, description, kind))
    return tuple(out)


# The original kernel's files and launch, and the keys earlier specs (and the sessions that carry
# them) wrote for the same: read alike, never written again.
EARLIER_KEYS = {"original": "baseline", "original_grid": "baseline_grid", "original_block": "baseline_block"}


def spec_entry(table: Mapping, key: str) -> Any:
    """A spec table's value of `key` (a parsed kernel.toml's, or a session's copy of one), or of
    the key earlier specs wrote for it; None with neither."""
    if key in table:
        return table[key]
    return table.get(EARLIER_KEYS.get(key, key))


def _written_key(s: _Spec, table: Mapping, key: str, where: str) -> str:
    """`key`, or the earlier key the spec wrote for it; both at once is an error."""
    earlier = EARLIER_KEYS[key]
    if key in table and earlier in table:
        raise s.fail(f"{where}.{key}", f"one of {key} and {earlier} (its earlier name), not both")
    return earlier if earlier in table else key


def _dims(s: _Spec, launch: Mapping, key: str, checked: Callable) -> tuple[Expression, ...]:
    raw = launch.get(key)
    if raw is None:
        raise s.fail(f"launch.{key}", "a list of one to three expressions")
    if not isinstance(raw, list):
        raw = [raw]
    if not 1 <= len(raw) <= 3:
        raise s.fail(f"launch.{key}", "a list of one to three expressions", raw)
    return tuple(checked(v, f"launch.{key}[{i}]") for i, v in enumerate(raw))


def _arguments(s: _Spec, raw: Any, checked: Callable, problem_names: set[str]) -> tuple[Argument, ...]:
    if not isinstance(raw, list) or not raw:
        raise s.fail("arg", "a list of [[arg]] tables, one for each kernel argument", raw)
    out: list[Argument] = []
    seen: set[str] = set()
    keys = {"name", "dtype", "role", "shape", "value", "init", "range", "rtol", "atol", "inf_fraction",
            "nonfinite", "constant"}
    for i, item in enumerate(raw):
        name, where = _named_table(s, "arg", i, item, keys, seen)
        dtype = s.string(item, "dtype", where)
        if dtype not in DTYPES:
            raise s.fail(f"{where}.dtype", f"one of {', '.join(DTYPES)}", dtype)
        role = s.string(item, "role", where)
        if role not in ROLES:
            raise s.fail(f"{where}.role", f"one of {', '.join(ROLES)}", role)
        shape: tuple[Expression, ...] = ()
        value = None
        if role == "scalar":
            if "value" not in item:
                raise s.fail(f"{where}.value", "the scalar's value (a number or an expression)")
            value = checked(item["value"], f"{where}.value", problem_names)
        else:
            raw_shape = item.get("shape")
            if not isinstance(raw_shape, list) or not raw_shape:
                raise s.fail(f"{where}.shape", "a list of size expressions", raw_shape)
            shape = tuple(checked(d, f"{where}.shape[{j}]", problem_names) for j, d in enumerate(raw_shape))
        init = s.string(item, "init", where, "randint" if dtype not in FLOAT_DTYPES else "normal")
        if init not in INITS:
            raise s.fail(f"{where}.init", f"one of {', '.join(INITS)}", init)
        low, high = -1.0, 1.0
        if init == "randint":
            low, high = 0, 100
        elif init == "positive":
            low, high = 0.01, 1.0
        range_exprs = None
        if "range" in item:
            r = item["range"]
            if not isinstance(r, list) or len(r) != 2:
                raise s.fail(f"{where}.range", "[low, high]: numbers or expressions over the problem sizes", r)
            if any(isinstance(x, str) for x in r):
                range_exprs = tuple(checked(x if isinstance(x, str) else str(x), f"{where}.range", problem_names)
                                    for x in r)
            elif (not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in r)
                    or not r[0] < r[1]):
                raise s.fail(f"{where}.range", "[low, high] with low < high", r)
            else:
                low, high = r
            if init == "positive" and range_exprs is None and low <= 0:
                raise s.fail(f"{where}.range", "a range above zero for a positive input", r)
        nonfinite = item.get("nonfinite", False)
        if not isinstance(nonfinite, bool):
            raise s.fail(f"{where}.nonfinite", "true or false", nonfinite)
        constant = item.get("constant", False)
        if not isinstance(constant, bool) or constant and role != "input":
            raise s.fail(f"{where}.constant", "true or false, true only for an input (a __constant__ array "
                                              "the host fills)", constant)
        tols = {}
        for t in ("rtol", "atol"):
            if t in item:
                v = item[t]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
                    raise s.fail(f"{where}.{t}", "a non-negative finite number", v)
                tols[t] = float(v)
        inf_fraction = item.get("inf_fraction", 0.0)
        if (isinstance(inf_fraction, bool) or not isinstance(inf_fraction, (int, float))
                or not 0 <= inf_fraction < 1 or (inf_fraction and dtype not in FLOAT_DTYPES)):
            raise s.fail(f"{where}.inf_fraction", "a fraction in [0, 1) of a float argument", inf_fraction)
        out.append(Argument(name, dtype, role, shape, value, init, low, high, **tols,
                            inf_fraction=float(inf_fraction), range_exprs=range_exprs,
                            nonfinite_ok=nonfinite, constant=constant))
    if not any(a.is_output for a in out):
        raise s.fail("arg", "at least one argument with role output or inout")
    return tuple(out)


def read_text_file(path: Path, error: type[Exception] = TemplateError, limit: int = SPEC_BYTES) -> str:
    """A UTF-8 file's text; a file that is missing, unreadable or larger than `limit` bytes (a
    spec is a page of TOML) is `error`, one line."""
    try:
        size = Path(path).stat().st_size
        if size > limit:
            raise error(f"{path}: {size} bytes, more than the {limit} such a file may hold")
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"{path}: cannot read: {e}") from None


def read_toml_file(path: Path, error: type[Exception] = TemplateError) -> dict:
    """A TOML file's data; a file that is missing, unreadable or not TOML is `error`, one line."""
    text = read_text_file(path, error)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(f"{path}: not valid TOML: {e}") from None
    except RecursionError:
        raise error(f"{path}: not valid TOML: nested too deeply") from None


def read_spec_toml(text: str) -> dict:
    """Parse TOML text (used where a spec travels inside a session)."""
    return tomllib.loads(text)
