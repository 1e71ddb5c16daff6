"""What a team ships from a tuning run: `kerntune export SESSION --format header|t4|json`.

- `json`: the leaderboard and the configurations shipped (one per size: a session's reported
  best, or a served-size run's dispatch set), with the figures `kerntune verify` checks again;
- `t4`: Kernel Tuner's T4 results file (schema 1.0.0: every result with its configuration, times
  in milliseconds, validity and measurements), with the device beside it;
- `header`: a self-contained C++/CUDA header: the template's source once per shipped
  configuration, each in a namespace of its own (its parameters as `#define`s around it), the
  launch geometry and the constraints as functions of the sizes, and a dispatch function from
  sizes to configuration (engine/cexpr.py writes the spec's expressions as C++).

Everything written comes from a session, which may come from anywhere: names go into C++ only
when they are plain identifiers, values only when they are plain C tokens, and text goes into
comments only with `*/` broken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from .cexpr import PRELUDE, to_cpp
from .events import ConfigEvaluated, LoopStarted
from .expressions import ExpressionError
from .result import ORIGINAL, Result, config_key, config_text, ranked
from .session import Session, load_session
from .summary import CampaignError, load_summary

FORMATS = ("header", "t4", "json")
EXPORT_FORMAT = "kerntune-export"
EXPORT_VERSION = 1
T4_SCHEMA_VERSION = "1.0.0"

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOKEN = re.compile(r"^[A-Za-z0-9_.+\-]+$")
# Words a size or parameter may not be called in the header's C++ (it would not compile).
_CPP_WORDS = frozenset("""alignas alignof and asm auto bool break case catch char class const constexpr continue
decltype default delete do double else enum explicit export extern false float for friend goto if inline int long
mutable namespace new noexcept not nullptr operator or private protected public register return short signed sizeof
static struct switch template this throw true try typedef typename union unsigned using virtual void volatile while
dim3 std""".split())


class ExportError(ValueError):
    """A session that cannot be written in the format asked for; the message is one line."""


def comment(text: Any) -> str:
    """Text that is safe inside a C comment, on one line."""
    return " ".join(str(text).split()).replace("*/", "* /")


def c_value(name: str, v: Any) -> str:
    """A parameter's value as a C token (a `#define`'s body)."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str) and _TOKEN.match(v):
        return v
    raise ExportError(f"parameter {name}: value {v!r} is not a C token; export it as JSON instead")


def c_name(name: Any, what: str) -> str:
    """A name read from a session, checked to be a C identifier before it is written as one."""
    text = str(name)
    if not IDENT.match(text) or text in _CPP_WORDS or text.startswith("kt_"):
        raise ExportError(f"{what} {text!r} is not a C identifier the header can use")
    return text


# what is shipped ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shipped:
    """One configuration shipped for one size, with the figures it was chosen on: its time there,
    the original's, the speedup (paired with the original when the run re-timed them together)
    and that speedup's 95% interval."""

    size: str
    problem: Mapping[str, int]
    config: Mapping[str, Any]
    median_us: float | None = None
    original_us: float | None = None
    speedup: float | None = None
    speedup_interval: tuple[float, float] | None = None
    covers: tuple[str, ...] = ()  # the sizes it is shipped for (a dispatch set's entry)

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "problem": dict(self.problem), "config": dict(self.config),
                "median_us": self.median_us, "original_us": self.original_us, "speedup": self.speedup,
                "speedup_interval": list(self.speedup_interval) if self.speedup_interval else None,
                "covers": list(self.covers or (self.size,))}


def shipped_of(session: Session) -> Shipped:
    """A session's reported best, as shipped: the paired figures when the leaders were re-timed."""
    if any(isinstance(e, LoopStarted) for e in session.events):
        # each round measured its own template, which the session's header does not hold
        raise ExportError(f"{session.path}: an agent loop's session: its rounds' templates are not its header's; "
                          "tune the template the loop wrote (kerntune tune DIR/kernel.toml) and ship that session")
    best = session.best()
    if best is None:
        raise ExportError(f"{session.path}: no verified configuration: nothing to ship")
    s = session.summary()
    base = s.get("default") or {}
    b = s["best"]
    interval = b.get("speedup_interval")
    return Shipped(size=str(session.space.get("problem_name") or "problem"), problem=_problem(session),
                   config=dict(best.config), median_us=b.get("paired_us") or best.median_us,
                   original_us=base.get("median_us"), speedup=s.get("speedup"),
                   speedup_interval=(float(interval[0]), float(interval[1])) if interval else None)


def paired_figures(session: Session, config: Mapping[str, Any]) -> tuple[float, float | None, tuple[float, float] | None] | None:
    """`config`'s figures from the session's paired rounds (the leaders and the original timed
    together): its paired median time, and its speedup over the original with the 95% interval
    when the original was among them; None when it was not re-timed with the leaders."""
    lead = session.leaders()
    if lead is None:
        return None
    keys = [config_key(c) for c in lead.configs]
    at = keys.index(config_key(config)) if config_key(config) in keys else -1
    if at < 0:
        return None
    if lead.original < 0:
        return lead.median_us[at], None, None
    return lead.median_us[at], lead.speedup[at], (lead.low[at], lead.high[at])


def shipped_of_folder(folder: Any) -> tuple[list[Shipped], dict[str, Session]]:
    """What a served-size run (or a campaign of one template) ships: its dispatch set, one entry
    per size, and each size's session."""
    try:
        summary = load_summary(Path(folder))
    except CampaignError as e:
        raise ExportError(str(e)) from None
    sets = summary["dispatch"]
    if len(sets) != 1:
        names = ", ".join(sorted({str(p.get("template")) for p in summary["pair"]}))
        raise ExportError(f"{folder}: " + ("no dispatch set was chosen there" if not sets else
                          f"a campaign of several templates ({names}): export one template's served-size run"))
    d = sets[0]
    base = Path(summary["path"]).parent
    pairs = {p.get("size"): p for p in summary["pair"] if p.get("template") == d.get("template")}
    sessions: dict[str, Session] = {}
    shipped = []
    for row in d.get("size", []):
        size = str(row.get("size"))
        name = str(pairs.get(size, {}).get("session", ""))
        if not name or Path(name).name != name:  # a session beside the summary, never a path elsewhere
            raise ExportError(f"{folder}: size {size!r} has no session beside the summary")
        sessions[size] = load_session(base / name)
        covers = next((tuple(m.get("covers", ())) for m in d.get("configs", [])
                       if config_key(m.get("config", {})) == config_key(row.get("config", {}))), (size,))
        orig, time = row.get("original_us"), row.get("time_us")
        speedup, interval = (orig / time if orig and time else None), None
        paired = paired_figures(sessions[size], row.get("config", {}))
        if paired is not None and paired[1] is not None:  # re-timed beside the original: those figures
            time, speedup, interval = paired
        shipped.append(Shipped(size, _problem(sessions[size]), dict(row.get("config", {})), time, orig,
                               speedup, interval, covers))
    if not shipped:
        raise ExportError(f"{folder}: the dispatch set serves no size")
    return shipped, sessions


def _problem(session: Session) -> dict[str, int]:
    p = session.space.get("problem")
    return {str(k): v for k, v in p.items()} if isinstance(p, Mapping) else {}


def _template_facts(session: Session) -> dict[str, Any]:
    t = session.template
    return {k: t.get(k) for k in ("name", "path", "fingerprint", "backend", "entry") if t.get(k) is not None}


def _device_facts(session: Session) -> dict[str, Any]:
    d = session.device
    return {k: d.get(k) for k in ("name", "backend", "vendor", "compute_capability", "driver") if d.get(k) is not None}


# json ----------------------------------------------------------------------------------------------

def _row(r: Result, rank: int | None, original_us: float | None) -> dict[str, Any]:
    row: dict[str, Any] = {"rank": rank, "config": dict(r.config), "status": r.status}
    for key in ("median_us", "spread", "min_us", "sol_fraction", "bandwidth_gbs", "gflops", "occupancy",
                "energy_j", "disturbed"):
        v = getattr(r, key, None)
        if v not in (None, ""):
            row[key] = v
    if r.ranked and original_us:
        row["speedup"] = original_us / r.median_us
    if r.resources is not None:
        row["resources"] = {"registers": r.resources.registers, "shared_static": r.resources.shared_static,
                            "local_bytes": r.resources.local_bytes, "spills": r.resources.spills}
    if r.message and not r.verified:
        row["message"] = comment(r.message)[:500]
    return row


def leaderboard(session: Session) -> list[dict[str, Any]]:
    """Every result, the ranked ones first with their rank."""
    base = session.default_result()
    original_us = base.median_us if base is not None and base.ranked else None
    board = ranked(session.results())
    keys = {id(r) for r in board}
    rows = [_row(r, i + 1, original_us) for i, r in enumerate(board)]
    rows += [_row(r, None, original_us) for r in session.results() if id(r) not in keys]
    return rows


def export_json(session: Session, shipped: Sequence[Shipped] | None = None,
                sizes: Mapping[str, Session] | None = None) -> dict[str, Any]:
    """The leaderboard and what is shipped; with `sizes` (a served-size run's sessions), each
    size's leaderboard."""
    ship = list(shipped) if shipped is not None else [shipped_of(session)]
    out = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "session": str(session.path),
            "created": session.info.get("created", ""), "template": _template_facts(session),
            "device": _device_facts(session), "problem": _problem(session),
            "objective": str(session.header.get("tuning", {}).get("objective", "time")),
            "shipped": [s.to_dict() for s in ship]}
    if sizes:
        out["leaderboards"] = {size: leaderboard(s) for size, s in sizes.items()}
    else:
        out["leaderboard"] = leaderboard(session)
    return out


# t4 ------------------------------------------------------------------------------------------------

# kerntune's statuses in T4's `invalidity` words
T4_INVALIDITY = {"ok": "correct", "compile_error": "compile", "launch_error": "runtime", "crashed": "runtime",
                 "timeout": "timeout", "pruned": "constraints", "wrong_result": "correctness",
                 "wrote_input": "correctness", "out_of_bounds": "correctness",
                 # verified, but faster than its speed of light: its measurement is not trusted
                 "suspect": "runtime"}


def export_t4(session: Session) -> dict[str, Any]:
    """Kernel Tuner's T4 results file: `schema_version` and one entry per result (times in
    milliseconds, as Kernel Tuner writes them); the device and the kernel beside them."""
    created = _created(session)
    objective = str(session.header.get("tuning", {}).get("objective", "time"))
    out = []
    results = session.results()
    at = {config_key(ev.result.config): ev.t for ev in session.events if isinstance(ev, ConfigEvaluated)}
    for r in results:
        measurements = [{"name": "status", "value": r.status, "unit": ""}]
        if r.median_us is not None:
            measurements.append({"name": "time", "value": r.median_us / 1e3, "unit": "ms"})
        for name, key, unit in (("spread", "spread", ""), ("sol_fraction", "sol_fraction", ""),
                                ("bandwidth", "bandwidth_gbs", "GB/s"), ("gflops", "gflops", "GFLOP/s"),
                                ("occupancy", "occupancy", ""), ("energy", "energy_j", "J")):
            v = getattr(r, key, None)
            if v is not None:
                measurements.append({"name": name, "value": v, "unit": unit})
        if r.resources is not None:
            measurements.append({"name": "registers", "value": r.resources.registers, "unit": ""})
        stamp = created + timedelta(seconds=float(at.get(config_key(r.config), 0.0)))
        out.append({
            "timestamp": stamp.isoformat(),
            "configuration": {k: (int(v) if isinstance(v, bool) else v) for k, v in r.config.items()},
            # the schema names compilation_time, Kernel Tuner's own writer compilation: both are given
            "times": {"compilation_time": r.compile_s * 1e3, "compilation": r.compile_s * 1e3,
                      "benchmark": r.time_s * 1e3, "framework": 0.0,
                      "search_algorithm": 0.0, "validation": r.verify_s * 1e3,
                      "runtimes": [t / 1e3 for t in r.times_us]},
            "invalidity": T4_INVALIDITY.get(r.status, "runtime"),
            "correctness": 1.0 if r.verified else 0.0,
            "measurements": measurements,
            "objectives": [objective],
        })
    return {"schema_version": T4_SCHEMA_VERSION, "results": out,
            "device": _device_facts(session), "kernel": _template_facts(session), "problem": _problem(session)}


def _created(session: Session) -> datetime:
    text = str(session.info.get("created", ""))
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return datetime.fromtimestamp(0, timezone.utc)


# header --------------------------------------------------------------------------------------------

@dataclass
class _Source:
    """The template's source with its `#include` lines taken out (they go above every copy, so
    that no header is read inside a namespace), and the macros it defines (undefined after each
    copy, so that every copy starts from the same state)."""

    body: str
    includes: list[str] = field(default_factory=list)
    macros: list[str] = field(default_factory=list)


def _split_source(text: str) -> _Source:
    from .cxx import parser

    raw = text.encode("utf-8")
    tree = parser().parse(raw)
    cuts: list[tuple[int, int]] = []
    out = _Source("")
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type == "preproc_include":
            line = raw[node.start_byte:node.end_byte].decode("utf-8").strip()
            if line not in out.includes:
                out.includes.append(line)
            cuts.append((node.start_byte, node.end_byte))
        elif node.type in ("preproc_def", "preproc_function_def"):
            name = node.child_by_field_name("name")
            if name is not None:
                macro = raw[name.start_byte:name.end_byte].decode("utf-8")
                if macro not in out.macros:
                    out.macros.append(macro)
        stack.extend(reversed(node.children))
    pieces, at = [], 0
    for start, end in sorted(cuts):
        pieces.append(raw[at:start])
        pieces.append(b"/* kerntune: this #include is above the configurations */\n")
        at = end
    pieces.append(raw[at:])
    out.body = b"".join(pieces).decode("utf-8")
    out.includes.sort(key=lambda line: raw.find(line.encode("utf-8")))
    return out


def _defines_of(options: Sequence[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """The spec's compiler options: its -D definitions (written into the header) and the others
    (which the header can only name)."""
    defines, other = [], []
    for o in options:
        if o.startswith("-D") and len(o) > 2:
            name, _, value = o[2:].partition("=")
            defines.append((c_name(name, "definition"), c_value(name, value or "1")))
        elif not o.startswith("-I"):
            other.append(o)
    return defines, other


def _spec_of(session: Session) -> dict[str, Any]:
    from .template import read_spec_toml

    text = session.template.get("spec")
    try:
        return read_spec_toml(text) if isinstance(text, str) else {}
    except ValueError as e:
        raise ExportError(f"{session.path}: the spec the session holds cannot be read: {e}") from None


def export_header(session: Session, shipped: Sequence[Shipped] | None = None) -> str:
    """The self-contained C++/CUDA header of the shipped configurations (one per size)."""
    ship = list(shipped) if shipped is not None else [shipped_of(session)]
    t = session.template
    if t.get("backend") != "cuda":
        raise ExportError(f"{session.path}: measured on {t.get('backend')!r}; a header is CUDA source "
                          "(export this session as json or t4)")
    source = t.get("source")
    if not isinstance(source, str) or not source.strip():
        raise ExportError(f"{session.path}: the session holds no template source")
    spec = _spec_of(session)
    kernel = spec.get("kernel") if isinstance(spec.get("kernel"), Mapping) else {}
    options = (kernel.get("options") or {}).get("cuda", []) if isinstance(kernel.get("options"), Mapping) else []
    defines, other = _defines_of([str(o) for o in options] if isinstance(options, list) else [])
    launch = spec.get("launch") if isinstance(spec.get("launch"), Mapping) else {}
    constraints = [c for c in spec.get("constraints", []) if isinstance(c, str)] \
        if isinstance(spec.get("constraints"), list) else []
    name = c_name(re.sub(r"[^A-Za-z0-9_]", "_", str(t.get("name") or "kernel")), "template name")
    entry = str(t.get("entry") or name)
    base, _, template_args = entry.partition("<")
    c_name(base, "kernel")
    if template_args and not _TOKEN.match(template_args.rstrip(">").replace(",", "").replace(" ", "")):
        raise ExportError(f"kernel {entry!r}: its template arguments are not plain C tokens")
    sizes = list(_problem(session))
    for s in ship:
        if list(s.problem) != sizes:
            raise ExportError(f"size {s.size}: its sizes ({', '.join(s.problem)}) are not the session's "
                              f"({', '.join(sizes)})")
    for n in sizes:
        c_name(n, "size")
    device_names = _device_names(session)
    split = _split_source(source)
    # each configuration once, however many sizes it is shipped for
    unique: dict[str, Mapping[str, Any]] = {}
    for s in ship:
        unique.setdefault(config_key(s.config), s.config)
    configs = list(unique.values())
    member = [list(unique).index(config_key(s.config)) for s in ship]
    guard = f"KERNTUNE_{name.upper()}_H"
    ns = f"kerntune_{name}"

    def names_of(config: Mapping[str, Any]):
        def name_of(n: str) -> str:
            if n in sizes:
                return f"s.{n}"
            if n in config:
                return c_value(n, config[n])
            if n in device_names:
                return repr(device_names[n])
            raise ExportError(f"`{n}` in the spec's launch or constraints is neither a size, a parameter nor "
                              "a device limit")
        return name_of

    lines = _preamble(session, spec, configs, sizes, entry, name, options, other, split)
    lines += _copies(configs, ship, member, defines, split, base, ns)
    lines += [f"namespace {ns} {{", "using namespace detail;", ""]
    geometry, feasible = [], []
    for config in configs:
        env = names_of(_with_defaults(spec, config))
        dims = [_dims(launch.get(k), env, k) for k in ("grid", "block")]
        shared = "0"
        if "shared_bytes" in launch:
            shared = f"(size_t)kt_int({_cpp(launch['shared_bytes'], env, 'shared_bytes')})"
        geometry.append(f"return Launch{{dim3({dims[0]}), dim3({dims[1]}), {shared}}};")
        conds = [f"{_cpp(c, env, 'constraint')} != 0.0" for c in constraints] or ["true"]
        feasible.append("return " + "\n        && ".join(conds) + ";")
    lines += _switch("The launch of configuration `config` at sizes `s` (the spec's launch expressions).",
                     "inline Launch geometry(int config, const Sizes &s)", geometry,
                     "return Launch{dim3(0, 0, 0), dim3(0, 0, 0), 0};")
    lines += _switch("Whether configuration `config` may run at sizes `s` (the spec's constraints).",
                     "inline bool feasible(int config, const Sizes &s)", feasible, "return false;")
    lines += _dispatch_and_launch(ship, member, len(configs), sizes, base, template_args)
    lines += [f"}}  // namespace {ns}", "", f"#endif  /* {guard} */", ""]
    return "\n".join(lines)


def _preamble(session: Session, spec: Mapping[str, Any], configs: Sequence[Mapping[str, Any]], sizes: Sequence[str],
              entry: str, name: str, options: Sequence[Any], other: Sequence[str], split: _Source) -> list[str]:
    """The header's first comment (where it came from, how to launch), its guard, its includes,
    `Sizes`, `Launch` and the helpers of the translated expressions."""
    guard, ns = f"KERNTUNE_{name.upper()}_H", f"kerntune_{name}"
    t = session.template
    local = [line.split(None, 1)[-1] for line in split.includes if '"' in line]
    lines = [f"/* kerntune: {comment(t.get('name'))}, {len(configs)} configuration{'s' if len(configs) != 1 else ''} "
             f"tuned on {comment(session.device.get('name', '?'))} (compute capability "
             f"{comment(session.device.get('compute_capability', '?'))}, {comment(session.device.get('driver', '?'))})",
             f" * session {comment(session.path)} ({comment(session.info.get('created', ''))})",
             f" * kernel {comment(entry)}: launch it with kerntune_{name}::launch(sizes, stream, "
             f"{', '.join(comment(a) for a in _arg_names(spec))})",
             " * launch(sizes, ...) runs the configuration dispatch(sizes) chooses: the one shipped for the",
             " * nearest size served (by the ratio of each size) among those whose constraints hold there;",
             " * launch(config, sizes, ...) runs one configuration. Both return cudaGetLastError().",
             f" * kerntune built each with: nvcc {comment(' '.join(['-O3', *[str(o) for o in options]]))}"
             + (f" (options a header cannot carry: {comment(' '.join(other))}: give them to nvcc)" if other else ""),
             *([f" * the source includes files of its own ({comment(', '.join(local))}): put the template's folder "
                "on nvcc's include path (-I)"] if local else []),
             " */",
             f"#ifndef {guard}", f"#define {guard}", "",
             "#include <cuda_runtime.h>", "#include <cmath>"]
    lines += split.includes
    lines += ["", f"namespace {ns} {{", "",
              "/* The sizes a launch is for. */",
              "struct Sizes {", *[f"    long long {n};" for n in sizes], "};", "",
              "struct Launch {", "    dim3 grid;", "    dim3 block;", "    size_t shared_bytes;", "};", "",
              f"static const int configs = {len(configs)};", "",
              "namespace detail {", PRELUDE + "}  // namespace detail", "",
              f"}}  // namespace {ns}", ""]
    return lines


def _copies(configs: Sequence[Mapping[str, Any]], ship: Sequence[Shipped], member: Sequence[int],
            defines: Sequence[tuple[str, str]], split: _Source, base: str, ns: str) -> list[str]:
    """The template's source once per configuration, in a namespace of its own, its parameters
    defined before it and every macro undefined after it."""
    lines: list[str] = []
    for i, config in enumerate(configs):
        mine = [s for s, m in zip(ship, member) if m == i]
        lines.append(f"/* configuration {i}: {comment(_fmt(config))}; shipped for "
                     + "; ".join(f"{comment(s.size)}{comment(_figures(s))}" for s in mine) + " */")
        for key, value in defines:
            lines.append(f"#define {key} {value}")
        for key, value in config.items():
            lines.append(f"#define {c_name(key, 'parameter')} {c_value(key, value)}")
        lines.append(f"#define {base} {base}__kt{i}")
        lines += [f"namespace {ns} {{ namespace config{i} {{", split.body.rstrip("\n"),
                  f"}} }}  // namespace {ns}::config{i}"]
        undef = dict.fromkeys([base, *(k for k, _ in defines), *config, *split.macros])
        lines += [f"#undef {m}" for m in undef if IDENT.match(m)]
        lines.append("")
    return lines


def _dispatch_and_launch(ship: Sequence[Shipped], member: Sequence[int], count: int, sizes: Sequence[str], base: str,
                         template_args: str) -> list[str]:
    """The header's dispatch function (sizes to configuration: `member[i]` is the configuration
    shipped for `ship[i]`) and its launch functions."""
    lines: list[str] = []
    lines.append("/* The configuration for sizes `s`: the one shipped for the nearest size served (the sum of")
    lines.append(" * the squared logarithms of the sizes' ratios), among those feasible there; -1 when none is. */")
    lines.append("inline int dispatch(const Sizes &s) {")
    lines.append(f"    static const int shipped = {len(ship)};")
    lines.append("    static const int config_of[shipped] = {" + ", ".join(map(str, member)) + "};")
    lines.append("    static const double served[shipped][" + str(max(len(sizes), 1)) + "] = {")
    for s in ship:
        lines.append("        {" + ", ".join(repr(float(s.problem[n])) for n in sizes) + "}," if sizes else "{0.0},")
    lines.append("    };")
    lines.append("    const double at[" + str(max(len(sizes), 1)) + "] = {"
                 + (", ".join(f"(double)s.{n}" for n in sizes) or "0.0") + "};")
    lines += ["    int chosen = -1;", "    double nearest = 0.0;",
              "    for (int p = 0; p < shipped; ++p) {",
              "        const int c = config_of[p];",
              "        if (!feasible(c, s)) continue;",
              "        double d = 0.0;",
              f"        for (int k = 0; k < {len(sizes)}; ++k) {{",
              "            double r = std::log((at[k] > 1.0 ? at[k] : 1.0) / (served[p][k] > 1.0 ? served[p][k] : 1.0));",
              "            d += r * r;", "        }",
              "        if (chosen < 0 || d < nearest) { chosen = c; nearest = d; }", "    }",
              "    return chosen;", "}", ""]
    lines.append("/* Launch configuration `config` at sizes `s` with the kernel's arguments, in its order. */")
    lines.append("template <typename... Args>")
    lines.append("inline cudaError_t launch(int config, const Sizes &s, cudaStream_t stream, Args... args) {")
    lines.append("    if (config < 0 || config >= configs || !feasible(config, s)) return cudaErrorInvalidConfiguration;")
    lines.append("    const Launch g = geometry(config, s);")
    lines.append("    switch (config) {")
    call = f"<{template_args}" if template_args else ""
    for i in range(count):
        kernel_i = f"config{i}::{base}__kt{i}{call}"
        lines += [f"    case {i}:",
                  # past 48 KiB of dynamic shared memory a kernel must opt in, as kerntune's launch did
                  "        if (g.shared_bytes > 48 * 1024) {",
                  f"            cudaError_t e = cudaFuncSetAttribute({kernel_i}, "
                  "cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g.shared_bytes);",
                  "            if (e != cudaSuccess) return e;",
                  "        }",
                  f"        {kernel_i}<<<g.grid, g.block, g.shared_bytes, stream>>>(args...);",
                  "        break;"]
    lines += ["    }", "    return cudaGetLastError();", "}", "",
              "/* Launch the configuration dispatch(s) chooses. */",
              "template <typename... Args>",
              "inline cudaError_t launch(const Sizes &s, cudaStream_t stream, Args... args) {",
              "    return launch(dispatch(s), s, stream, args...);", "}", ""]
    return lines


def _switch(doc: str, head: str, cases: Sequence[str], default: str) -> list[str]:
    """A C++ function of (config, sizes) that is one `case` per configuration."""
    return [f"/* {doc} */", head + " {", "    (void)s;", "    switch (config) {",
            *(f"    case {i}: {body}" for i, body in enumerate(cases)),
            f"    default: {default}", "    }", "}", ""]


def _with_defaults(spec: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """A configuration with every parameter the spec declares (the original, `{}`, is its defaults)."""
    params = spec.get("param") if isinstance(spec.get("param"), list) else []
    out = {p["name"]: p["default"] for p in params if isinstance(p, Mapping) and "name" in p and "default" in p}
    out.update(config)
    return out


def _cpp(expr: Any, env: Any, where: str) -> str:
    try:
        return to_cpp(expr, env)
    except ExpressionError as e:
        raise ExportError(f"the spec's {where} `{comment(expr)[:80]}`: {e}") from None


def _dims(exprs: Any, env: Any, where: str) -> str:
    if not isinstance(exprs, list) or not exprs or len(exprs) > 3:
        raise ExportError(f"the spec's launch {where} is not a list of one to three expressions")
    return ", ".join(f"(unsigned)kt_int({_cpp(e, env, where)})" for e in exprs)


def _device_names(session: Session) -> dict[str, int]:
    from .device import DeviceLimits

    try:
        return DeviceLimits.from_dict(session.device).expression_names()
    except (TypeError, ValueError, KeyError):
        return {}


def _arg_names(spec: Mapping[str, Any]) -> list[str]:
    args = spec.get("arg") if isinstance(spec.get("arg"), list) else []
    return [str(a.get("name")) for a in args if isinstance(a, Mapping)]


def _fmt(config: Mapping[str, Any]) -> str:
    return config_text(config) or f"the {ORIGINAL}"


def _figures(s: Shipped) -> str:
    parts = []
    if s.median_us is not None:
        parts.append(f"{s.median_us:.3f} us at {' '.join(f'{k}={v}' for k, v in s.problem.items())}")
    if s.speedup:
        interval = (f" (95% interval {s.speedup_interval[0]:.2f}-{s.speedup_interval[1]:.2f})"
                    if s.speedup_interval else "")
        parts.append(f"{s.speedup:.2f}x the original{interval}")
    return ("; " + ", ".join(parts)) if parts else ""

