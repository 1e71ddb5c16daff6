"""Template proposals: what a generator hands the engine, and the template folder made from one.

A proposal carries only the template's sources and the parts of the spec that templating changes
(parameters, constraints, launch geometry). Arguments, problem sizes, verification sizes, the cost
model and the numpy reference always come from the original spec, so a proposal cannot change
what the kernel is checked against. The spec is written with tomli-w from plain data; nothing in a
proposal is ever evaluated, only parsed by engine/template.py and engine/expressions.py.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .device import DeviceLimits
from .expressions import Expression
from .cxx import includes
from .template import (INCLUDE_DEPTH, SOURCE_BYTES, Parameter, ParamValue, Template, TemplateError, find_include,
                       parse_template, read_spec_toml)

EXTENSIONS = {"cuda": "cu", "opencl": "cl"}


# A proposed parameter is a template's parameter: its values, and the default that reproduces the
# original (compose_spec writes it as a [[param]] table).
ParamProposal = Parameter


@dataclass(frozen=True)
class TemplateProposal:
    """A generator's template: sources by backend, parameters, constraints and launch geometry.

    `grid`, `block` and `shared_bytes` left as None keep the original's launch."""

    sources: Mapping[str, str]
    parameters: tuple[ParamProposal, ...]
    constraints: tuple[str, ...] = ()
    grid: tuple[str, ...] | None = None
    block: tuple[str, ...] | None = None
    shared_bytes: str | None = None
    summary: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def default_config(self) -> dict[str, ParamValue]:
        return {p.name: p.default for p in self.parameters}


def original_launch(original: Template, limits: DeviceLimits | None = None) -> tuple[list[str], list[str]]:
    """The original kernel's launch (grid, block) as expressions over problem names only.

    A spec that already has parameters is taken at its defaults; device names become this
    device's values (a template is made for the device it is tuned on)."""
    if original.original_block and not original.parameters:
        return ([e.source for e in original.original_grid], [e.source for e in original.original_block])
    values: dict[str, Any] = dict(original.default_config())
    if limits is not None:
        values.update(limits.expression_names())

    def fixed(exprs: tuple[Expression, ...]) -> list[str]:
        return [_substitute(e.source, values) for e in exprs]

    return fixed(original.grid), fixed(original.block)


def _substitute(text: str, values: Mapping[str, Any]) -> str:
    for name, v in values.items():
        text = re.sub(rf"\b{re.escape(name)}\b", f"({_literal(v)})", text)
    return text


def _literal(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def compose_spec(original: Template, proposal: TemplateProposal, limits: DeviceLimits | None = None,
                 header: str = "") -> str:
    """The kernel.toml text of a proposal, built on the original spec."""
    data = read_spec_toml(original.spec_text)
    kernel = dict(data.get("kernel", {}))
    backends = sorted(proposal.sources)
    kernel["sources"] = {b: f"kernel.{EXTENSIONS[b]}" for b in backends}
    kernel.pop("baseline", None)  # the key earlier specs wrote for it
    kernel["original"] = {b: f"original.{EXTENSIONS[b]}" for b in backends}
    if original.reference_path is not None:
        ref = original.reference_path.name
        if original.reference_function != "reference":
            ref += f":{original.reference_function}"
        kernel["reference"] = ref
    kernel.pop("options", None)
    kernel.pop("absolute_includes", None)
    # the template is written elsewhere: the headers the original includes go beside it, under
    # relative include folders, so that its own include check applies (`carried_headers`); where
    # they cannot, the original's include folders (its source's own first) go with it as absolute
    # paths, which the spec then says it takes (as the original's spec did)
    carried = carried_headers(original, backends)
    if carried is not None:
        options = {b: opts for b, opts in carried[1].items() if opts}
    else:
        options = {b: list(original.options_for(b)) for b in backends if original.options_for(b)}
    if options:
        kernel["options"] = options
        if carried is None and any(o.startswith("-I") for opts in options.values() for o in opts):
            kernel["absolute_includes"] = True
    data["kernel"] = kernel
    data["param"] = [
        {k: v for k, v in (("name", p.name), ("description", p.description), ("kind", p.kind),
                           ("values", list(p.values)), ("default", p.default)) if v != ""}
        for p in proposal.parameters
    ]
    # the original kernel is the template's default configuration: the sizes its own spec requires
    # (`K % 32 == 0` of a tiled product that checks no bound) stay required, or the engine's odd
    # verification size (tune.odd_problem) would make one the original cannot run
    kept = [c.text for c in original.constraints if not original.parameters and c.text not in proposal.constraints]
    data["constraints"] = kept + list(proposal.constraints)
    launch = dict(data.get("launch", {}))
    grid, block = original_launch(original, limits)
    if proposal.grid is not None:
        launch["grid"] = list(proposal.grid)
    if proposal.block is not None:
        launch["block"] = list(proposal.block)
    if proposal.shared_bytes is not None:
        launch["shared_bytes"] = proposal.shared_bytes
    for key in ("baseline_grid", "baseline_block"):  # the keys earlier specs wrote for them
        launch.pop(key, None)
    launch["original_grid"] = grid
    launch["original_block"] = block
    data["launch"] = launch
    # tables in the order a reader expects: the kernel, its parameters, then the rest
    order = ["constraints", "kernel", "param", "launch", "arg", "problem", "verify", "cost"]
    ordered = {k: data[k] for k in order if k in data}
    ordered.update({k: v for k, v in data.items() if k not in ordered})
    lines = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return lines + dump_spec(ordered)


def write_template(original: Template, proposal: TemplateProposal, directory: Path,
                   limits: DeviceLimits | None = None, header: str = "") -> Template:
    """Write a proposal's template folder (spec, sources, original sources, reference) and load it.

    Raises TemplateError, with the spec's own one-line message, when the result is no template."""
    for backend, source in proposal.sources.items():
        if backend not in EXTENSIONS:
            raise TemplateError(f"a proposal has a source for an unknown backend {backend!r}")
        if not isinstance(source, str) or not source.strip():
            raise TemplateError(f"the proposed {backend} source is empty")
        if backend not in original.sources:
            raise TemplateError(f"the original kernel has no {backend} source to template")
    if not proposal.sources:
        raise TemplateError("the proposal has no source")
    directory.mkdir(parents=True, exist_ok=True)
    for backend, source in proposal.sources.items():
        ext = EXTENSIONS[backend]
        (directory / f"kernel.{ext}").write_text(source, encoding="utf-8")
        (directory / f"original.{ext}").write_text(original.source_for(backend), encoding="utf-8")
    if original.reference_path is not None:
        shutil.copyfile(original.reference_path, directory / original.reference_path.name)
    carried = carried_headers(original, sorted(proposal.sources))
    if carried is not None:
        for opts in carried[1].values():  # every include folder the spec names exists, headers or not
            for o in opts:
                if o.startswith("-I"):
                    (directory / o[2:]).mkdir(parents=True, exist_ok=True)
        for where, header_file in carried[0].items():
            (directory / where).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(header_file, directory / where)
    text = compose_spec(original, proposal, limits, header)
    spec = directory / "kernel.toml"
    spec.write_text(text, encoding="utf-8")
    return parse_template(text, spec)


# Where the include folders of the original's spec go in a template's folder: INCLUDE_FOLDERS/1, ...
INCLUDE_FOLDERS = "include"


def carried_headers(original: Template, backends: list[str]) -> tuple[dict[Path, Path], dict[str, list[str]]] | None:
    """The headers the original's sources include, and what those include in turn, laid out in a
    template's folder as the compiler finds them from there: what it finds beside a file goes
    beside that file's copy, what it finds in an include folder goes under that folder's place
    (INCLUDE_FOLDERS/N, a relative -I). Returns (the template's paths -> the files to copy there,
    each backend's compiler options), or None where the headers cannot be carried so: the
    original's spec lets its includes out of its folders (`absolute_includes`), a name a macro
    gives, an absolute name, or one that would land outside the template's folder or on another."""
    if read_spec_toml(original.spec_text).get("kernel", {}).get("absolute_includes") is True:
        return None
    places: dict[Path, Path] = {}
    files: dict[Path, Path] = {}
    taken = {Path(f"{kind}.{EXTENSIONS[b]}") for b in backends for kind in ("kernel", "original")}
    taken |= {Path("kernel.toml")} | ({Path(original.reference_path.name)} if original.reference_path else set())
    options: dict[str, list[str]] = {}
    for b in backends:
        own = Path(original.source_folders.get(b) or original.spec_path.parent).resolve()
        places.setdefault(own, Path("."))
        if places[own] != Path("."):
            return None  # the backends' sources in different folders: one cannot be beside both
        folders, opts = [own], []
        for o in original.compile_options.get(b, ()):
            if o.startswith("-I"):
                folder = Path(o[2:]).resolve()
                place = places.setdefault(folder, Path(INCLUDE_FOLDERS) / str(len(places)))
                folders.append(folder)
                if place != Path("."):
                    opts.append(f"-I{place.as_posix()}")
            else:
                opts.append(o)
        options[b] = opts
        todo = [(original.source_for(b), own, Path("."), INCLUDE_DEPTH)]
        while todo:
            text, here, at, depth = todo.pop()
            for kind, name in includes(text):
                if kind == "computed" or Path(name).is_absolute():
                    return None
                hit = find_include(kind, name, here, folders)
                if hit is None:
                    continue  # a system header
                found, index = hit
                where = Path(os.path.normpath((at if index is None else places[folders[index]]) / name))
                if where.is_absolute() or where.parts[:1] == ("..",) or where in taken:
                    return None
                if where in files:
                    if files[where].resolve() != found.resolve():
                        return None
                    continue
                if found.stat().st_size > SOURCE_BYTES:
                    return None
                files[where] = found
                if depth > 0:
                    todo.append((found.read_text(encoding="utf-8", errors="replace"), found.parent, where.parent,
                                 depth - 1))
    return files, options


def narrowed(template: Template, values: Mapping[str, tuple[ParamValue, ...]]) -> Template:
    """The same template with some parameters' value lists replaced (the default always kept)."""
    if not values:
        return template
    data = read_spec_toml(template.spec_text)
    for item in data.get("param", []):
        if item.get("name") in values:
            chosen = list(dict.fromkeys(values[item["name"]]))
            if item["default"] not in chosen:
                chosen.insert(0, item["default"])
            item["values"] = chosen
    return parse_template(dump_spec(data), template.spec_path, template.sources)


def source_diff(original: str, template: str, backend: str) -> str:
    """A unified diff of the original kernel against its template."""
    ext = EXTENSIONS.get(backend, "txt")
    return "".join(difflib.unified_diff(
        original.splitlines(keepends=True), template.splitlines(keepends=True),
        fromfile=f"original.{ext}", tofile=f"kernel.{ext}"))


def dump_spec(data: Mapping[str, Any]) -> str:
    """A spec's data as TOML laid out as a person writes one: value lists on one line, one
    `[[param]]` or `[[arg]]` table after another."""
    head: list[str] = []
    body: list[str] = []
    for key, value in data.items():
        if isinstance(value, dict):
            body.append(_table(key, value))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            body.extend(_table(key, v, array=True) for v in value)
        else:
            head.append(f"{_key(key)} = {_value(value)}")
    return "\n\n".join(["\n".join(head)] * bool(head) + body) + "\n"


def _table(name: str, table: Mapping[str, Any], array: bool = False) -> str:
    lines = [f"[[{name}]]" if array else f"[{name}]"]
    nested = []
    for key, value in table.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            nested.extend(_table(f"{name}.{_key(key)}", v, array=True) for v in value)
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    return "\n\n".join(["\n".join(lines)] + nested)


def _key(key: str) -> str:
    return key if re.match(r"^[A-Za-z0-9_-]+$", key) else json.dumps(key)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)  # JSON's escapes are TOML basic-string escapes
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }" if v else "{}"
    raise TypeError(f"no TOML form for {type(v).__name__}")
