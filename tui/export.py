"""Files the dashboard writes: the best configuration as a C header or JSON, a copy of the session,
and any configuration's generated source (`config_source`, which `kerntune show --source` prints too).

Everything written comes from a session, which may come from anywhere: names and values go into
the header only when they are plain C tokens, and text goes into comments only with `*/` broken.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

from kerntune.engine.export import IDENT, ExportError, c_value, comment
from kerntune.engine.result import Result
from kerntune.engine.session import file_stem

from .state import DashboardState


def _best(state: DashboardState):
    best = state.best
    if best is None:
        raise ExportError("no verified configuration yet: nothing to export")
    return best


def best_header(state: DashboardState, session_path: Path | None = None) -> str:
    """The header `kerntune export SESSION --format header` writes (the kernel, its launch and the
    shipped configuration, self-contained) for a CUDA session whose file holds a reported best;
    otherwise (an OpenCL run, an agent loop's session, no session file) the best configuration as
    `#define` lines, with where it came from and why it is only that in a comment."""
    best = _best(state)
    why = "the session is not saved to a file"
    if session_path is not None:
        from kerntune.engine.export import export_header
        from kerntune.engine.session import SessionError, load_session

        try:
            return export_header(load_session(Path(session_path)))
        except (ExportError, SessionError, OSError) as e:
            why = str(e)
    return _defines_header(state, best, session_path, why)


def _defines_header(state: DashboardState, best: Result, session_path: Path | None, why: str) -> str:
    template = str(state.template.get("name") or "kernel")
    guard = "KERNTUNE_" + re.sub(r"[^A-Za-z0-9]", "_", template).upper() + "_BEST_H"
    problem = " ".join(f"{k}={v}" for k, v in _problem(state).items())
    speed = state.speedup(best)
    lines = [
        f"/* kerntune: the fastest verified configuration of {comment(template)}",
        f" * problem {comment(problem) or '-'} on {comment(state.device.get('name', '?'))} "
        f"({comment(state.device.get('backend') or state.template.get('backend', '?'))})",
        f" * median {best.median_us:.3f} us"
        + (f", {speed:.2f}x the default configuration" if speed else "")
        + (f", {100 * best.sol_fraction:.1f}% of speed-of-light" if best.sol_fraction is not None else ""),
    ]
    if session_path is not None:
        lines.append(f" * session {comment(session_path)}")
    lines += [f" * only the configuration's #define lines: {comment(why)}", " */", f"#ifndef {guard}", f"#define {guard}"]
    for name, value in best.config.items():
        if not IDENT.match(str(name)):
            raise ExportError(f"parameter {name!r} is not a C identifier")
        lines.append(f"#define {name} {c_value(name, value)}")
    lines += [f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def best_json(state: DashboardState, session_path: Path | None = None) -> str:
    """The best configuration and its figures as one JSON object."""
    best = _best(state)
    base = state.default_result
    out = {
        "template": state.template.get("name", ""),
        "problem": _problem(state),
        "device": state.device.get("name", ""),
        "backend": state.device.get("backend") or state.template.get("backend", ""),
        "config": dict(best.config),
        "median_us": best.median_us,
        "spread": best.spread,
        "sol_fraction": best.sol_fraction,
        "bandwidth_gbs": best.bandwidth_gbs,
        "speedup": state.speedup(best),
        "default": {"config": dict(base.config), "median_us": base.median_us} if base is not None else None,
        "winner_verified": state.winner.ok if state.winner is not None else None,
        "session": str(session_path) if session_path is not None else None,
    }
    return json.dumps(out, indent=2) + "\n"


def _problem(state: DashboardState) -> Mapping[str, Any]:
    if state.started is not None:
        return dict(state.started.problem)
    p = state.space.get("problem")
    return dict(p) if isinstance(p, Mapping) else {}


def write_file(path: Path, text: str, force: bool = False) -> Path:
    """Write text to path (its folder is created); returns the path written. An existing file is
    written over only with `force`, as every command that writes a file asks for --force."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ExportError(f"{path} is a folder; give a file name")
    if path.exists() and not force:
        raise ExportError(f"{path} already exists; give another name")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def save_copy(session_path: Path, dest: Path) -> Path:
    """Copy the session file as it stands (a live run keeps appending to the original)."""
    dest = Path(dest).expanduser()
    if dest.is_dir():
        dest = dest / Path(session_path).name
    if dest.exists() and dest.resolve() == Path(session_path).resolve():
        raise ExportError(f"{dest} is the session itself; choose another path")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(session_path, dest)
    return dest


# config source ----------------------------------------------------------------------------------
SOURCE_SUFFIX = {"cuda": ".cu", "opencl": ".cl"}


def config_source(header: Mapping[str, Any], result: Result, *, rank: int | None = None,
                  ranked: int | None = None, default_us: float | None = None,
                  session_path: Path | str | None = None, template: Mapping[str, Any] | None = None) -> str:
    """A configuration as one standalone source file, the program that was measured: a comment
    with where it came from, its launch geometry (grid, block, dynamic shared bytes) and compiler
    options, the configuration's `#define` lines, then the source of the template it was measured
    with (`template`, as DashboardState.template_of gives it; the header's by default), whose
    `#ifndef` defaults they override. The original kernel (no configuration) is its own source
    at its own launch."""
    template = _mapping(template if template is not None else header.get("template"))
    device = _mapping(header.get("device"))
    backend = str(template.get("backend") or device.get("backend") or "")
    original = not result.config
    source = template.get("original_source") or template.get("source") if original else template.get("source")
    if not isinstance(source, str) or not source.strip():
        raise ExportError("the session holds no template source")
    spec = _spec(template)
    problem = _problem_of(header)
    name = comment(template.get("name") or "kernel")
    if rank:
        where = f"the configuration ranked {rank}" + (f" of {ranked}" if ranked else "")
    else:
        where = f"a configuration that did not rank ({comment(result.status)})"
    figures = []
    if result.median_us is not None:
        figures.append(f"median {result.median_us:.3f} us")
    if result.sol_fraction is not None:
        figures.append(f"{100 * result.sol_fraction:.1f}% of speed-of-light")
    if default_us and result.median_us:
        figures.append(f"{default_us / result.median_us:.2f}x the default configuration")
    grid, block, shared = _geometry(spec, problem, device, result, original)
    unit = ("work-groups", "work-items") if backend == "opencl" else ("blocks", "threads")
    lines = [f"/* kerntune: {name}, {where}" + (f" ({', '.join(figures)})" if figures else ""),
             f" * problem {comment(' '.join(f'{k}={v}' for k, v in problem.items())) or '-'} on "
             f"{comment(device.get('name', '?'))} ({comment(backend or '?')})"]
    if grid and block:
        lines.append(f" * launch: grid {_dims(grid)} {unit[0]}, block {_dims(block)} {unit[1]}, "
                     f"{shared if shared is not None else '?'} bytes of dynamic shared memory"
                     + (" (at each __local pointer argument)" if backend == "opencl" and shared else ""))
    else:
        lines.append(" * launch: unknown (the session does not record it for this configuration)")
    lines.append(f" * compile: {comment(' '.join(compile_command(backend, spec, device)))}"
                 " (the defines below stand for -D options)")
    lines.append(f" * kernel: {comment(template.get('entry') or name)}")
    if session_path is not None:
        lines.append(f" * session {comment(session_path)}")
    lines.append(" */")
    for key, value in result.config.items():
        if not IDENT.match(str(key)):
            raise ExportError(f"parameter {key!r} is not a C identifier")
        lines.append(f"#define {key} {c_value(key, value)}")
    return "\n".join(lines) + "\n\n" + source.rstrip("\n") + "\n"


def compile_command(backend: str, spec: Mapping[str, Any], device: Mapping[str, Any]) -> list[str]:
    """The compiler and options kerntune built the configuration with, as words."""
    kernel = _mapping(spec.get("kernel"))
    options = _mapping(kernel.get("options")).get(backend, [])
    extra = [str(o) for o in options] if isinstance(options, list) else []
    if backend == "cuda":
        from kerntune.engine.backends.cuda import NVCC_FLAGS

        cc = str(device.get("compute_capability") or "").replace(".", "")
        arch = [f"-arch=sm_{cc}"] if cc.isdigit() else []
        return ["nvcc", "-cubin", *arch, *NVCC_FLAGS, *extra]
    if backend == "opencl":
        return ["clBuildProgram", *(extra or ["with no options"])]
    return [backend or "compiler", *extra]


def source_name(template: str, backend: str, rank: int | None, status: str, folder: Path = Path(".")) -> Path:
    """`<template>-<rank>.cu` (or `.cl`; `-<status>` for a row without a rank), with `-2`, `-3`, …
    added until no file of that name exists."""
    suffix = SOURCE_SUFFIX.get(backend, ".c")
    stem = file_stem(f"{file_stem(template)}-{rank if rank else file_stem(status, 'failed')}")
    names = itertools.chain([f"{stem}{suffix}"], (f"{stem}-{n}{suffix}" for n in itertools.count(2)))
    return next(folder / name for name in names if not (folder / name).exists())


def _mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _spec(template: Mapping[str, Any]) -> Mapping[str, Any]:
    """The template's kernel.toml, as data (TOML is read, never run)."""
    from kerntune.engine.template import read_spec_toml

    text = template.get("spec")
    if not isinstance(text, str):
        return {}
    try:
        return read_spec_toml(text)
    except ValueError:
        return {}


def _problem_of(header: Mapping[str, Any]) -> dict[str, Any]:
    p = _mapping(header.get("space")).get("problem")
    return dict(p) if isinstance(p, Mapping) else {}


def _geometry(spec: Mapping[str, Any], problem: Mapping[str, Any], device: Mapping[str, Any],
              result: Result, original: bool = False) -> tuple[Sequence[int], Sequence[int], int | None]:
    """Grid and block as recorded (else from the template's launch expressions; the original's
    from its own launch when the spec keeps one) and the dynamic shared bytes from its
    `shared_bytes` expression (the original's at the defaults); evaluated by kerntune's
    expression reader."""
    from kerntune.engine.device import DeviceLimits
    from kerntune.engine.expressions import ExpressionError, evaluate
    from kerntune.engine.template import spec_entry

    launch = _mapping(spec.get("launch"))
    env: dict[str, Any] = {}
    try:
        env.update(DeviceLimits.from_dict(device).expression_names())
    except (TypeError, ValueError, KeyError):
        pass
    env.update(problem)
    params = spec.get("param") if isinstance(spec.get("param"), list) else []
    env.update({p["name"]: p["default"] for p in params if isinstance(p, Mapping) and "name" in p and "default" in p})
    env.update(result.config)
    if original and isinstance(spec_entry(launch, "original_block"), list):
        launch = {**launch, "grid": spec_entry(launch, "original_grid"), "block": spec_entry(launch, "original_block")}

    def dims(key: str) -> tuple[int, ...]:
        exprs = launch.get(key)
        if not isinstance(exprs, list):
            return ()
        try:
            out = [int(evaluate(e, env)) for e in exprs]
        except (ExpressionError, TypeError, ValueError, ZeroDivisionError):
            return ()
        return tuple(out + [1] * (3 - len(out)))

    grid = tuple(result.grid) or dims("grid")
    block = tuple(result.block) or dims("block")
    shared: int | None = 0
    if "shared_bytes" in launch:
        try:
            shared = int(evaluate(launch["shared_bytes"], env))
        except (ExpressionError, TypeError, ValueError, ZeroDivisionError):
            shared = None
    return grid, block, shared


def _dims(d: Sequence[int]) -> str:
    return " x ".join(str(int(x)) for x in d)
