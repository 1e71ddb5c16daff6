"""A session's header: what a run measured on, with what, and how, written once at the top of its file.

    [session]   format, version, id, created, tool version, command
    [device]    the device's limits
    [template]  name, fingerprint, backend, the spec, the source and the original source
    [space]     problem, total, feasible, pruned by rule
    [tuning]    strategy, budget, seed, timing policy

`run_header` builds it for both drivers (a tuning run, the agent loop); the driver writes it to
the session file and hands the same object to its sinks, so that nothing reads the file back.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

from .certificate import load_certificate

if TYPE_CHECKING:  # types only: the header module sits below the template and the space
    from .device import DeviceLimits
    from .space import Space
    from .template import Problem, Template

FORMAT = "kerntune-session"
VERSION = 1
HEADER_TABLES = ("session", "device", "template", "space", "tuning")


def tool_version() -> str:
    try:
        from importlib.metadata import version

        return version("kerntune")
    except Exception:
        return "0+unknown"


@dataclass(frozen=True, eq=False)
class SessionHeader(Mapping[str, Any]):
    """The five tables of a session's header. It reads as the mapping the file holds
    (`header["template"]["name"]`, `header.get("space", {})`) and by field (`header.template`);
    equal to any mapping of the same tables. The tables are not to be changed once built."""

    session: Mapping[str, Any] = field(default_factory=dict)
    device: Mapping[str, Any] = field(default_factory=dict)
    template: Mapping[str, Any] = field(default_factory=dict)
    space: Mapping[str, Any] = field(default_factory=dict)
    tuning: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, tables: Mapping[str, Any]) -> "SessionHeader":
        """A header from a mapping of tables by name (a missing table is empty)."""
        if isinstance(tables, SessionHeader):
            return tables
        return cls(**{name: dict(tables.get(name) or {}) for name in HEADER_TABLES})

    def __getitem__(self, name: str) -> Mapping[str, Any]:
        if name not in HEADER_TABLES:
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(HEADER_TABLES)

    def __len__(self) -> int:
        return len(HEADER_TABLES)


def new_header(*, command: Iterable[str], device: Mapping[str, Any], template: Mapping[str, Any],
               space: Mapping[str, Any], tuning: Mapping[str, Any]) -> SessionHeader:
    """A header with a new session id and the time now, from its other tables as given."""
    now = datetime.now(timezone.utc)
    return SessionHeader(
        session={
            "format": FORMAT,
            "version": VERSION,
            "id": uuid.uuid4().hex[:12],
            "created": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tool_version": tool_version(),
            "command": [str(c) for c in command],
        },
        device=dict(device),
        template=dict(template),
        space=dict(space),
        tuning=dict(tuning),
    )


def run_header(template: "Template", backend: str, problem: "Problem", limits: "DeviceLimits",
               space: "Space | None", options: Any, plan: Mapping[str, Any], *,
               original_source: str | None = None) -> SessionHeader:
    """The header of a run of `template` on `backend` at `problem`: `space` None when no space is
    built yet (the agent loop starts from a kernel); `options` (TuneOptions) gives the command,
    the seed, the timeout and the timing and verification policies, `plan` the driver's own
    settings, first in [tuning]. The original source is the template's own unless given."""
    source = template.source_for(backend)
    if original_source is None:
        original_source = template.original_sources.get(backend, source)
    device = limits.to_dict()
    cert = load_certificate(limits.backend, limits.name, limits.driver)
    if cert is not None:  # `kerntune selftest` on this device and driver: what it proved, and when
        device["selftest"] = cert
    return new_header(
        command=options.command,
        device=device,
        template={
            "name": template.name,
            "description": template.description,
            "path": str(template.spec_path),
            "fingerprint": template.fingerprint(),
            "backend": backend,
            "entry": template.entry,
            "parameters": [p.name for p in template.parameters],
            "default_config": template.default_config(),
            "spec": template.spec_text,
            "source": source,
            "original_source": original_source,
        },
        space={
            "problem_name": problem.name,
            "problem": dict(problem.values),
            "total": space.total if space is not None else 0,
            "feasible": space.feasible if space is not None else 0,
            "pruned": dict(space.pruned) if space is not None else {},
        },
        tuning={
            **plan,
            "seed": options.seed,
            **({"search_seed": options.search_seed} if options.search_seed is not None else {}),
            "config_timeout": options.config_timeout,
            "timing": asdict(options.timing),
            "verify": asdict(options.verify),
        },
    )
