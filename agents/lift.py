"""The rules generator's rewriting: literals of the original kernel lifted into template parameters.

What is lifted, each into a parameter whose default is the literal, so that the default
configuration is the original kernel token for token:

- `#define NAME value` (an integer, with a name that says what it tunes: BLOCK, VEC, TILE, ...)
  becomes `#ifndef NAME / #define NAME value / #endif`;
- `constexpr int name = value;` takes its value from a parameter of its own;
- `#pragma unroll N` takes its count from a parameter (through `_Pragma`, since `#pragma unroll`
  does not expand macros); a bare `#pragma unroll` gets one whose value 0 keeps it as written;
- the launch's block size (a literal of the spec's `block`, and the same literal in
  `__launch_bounds__` / `reqd_work_group_size` and in the grid) becomes a parameter too.

Value ranges come from the device's limits; constraints keep every configuration correct (a
parameter that divides a problem size, `d / VEC`, must divide it exactly).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from kerntune.engine.device import DeviceLimits
from kerntune.engine.proposal import ParamProposal, TemplateProposal, original_launch
from kerntune.engine.template import DEVICE_NAMES, Template

# Names that say what a literal tunes, by kind. A #define or constexpr with another name (N_HEADS,
# PI, WARP_SIZE) is part of what the kernel computes and is left alone.
KINDS = (
    ("threads", re.compile(r"(^|_)(BLOCK|THREADS?|NT|WG|WORK_?GROUP|LOCAL_SIZE|BLOCK_?SIZE|BLOCK_?DIM|TPB)(_|$)")),
    ("vector", re.compile(r"(^|_)(VEC|VECTOR|VW|WIDTH|PACK|LANES)(_|$|\d)")),
    ("unroll", re.compile(r"(^|_)UNROLL(_|$)")),
    ("flag", re.compile(r"(^|_)(USE|ENABLE|FAST|HAS|WITH)(_|$)")),
    ("tile", re.compile(r"(^|_)(TILE|B[MNK]|T[MNK]|ROWS|COLS|ITEMS|PER_THREAD|CHUNK|STAGES|WARPS|SPLIT)(_|$|\d)")),
)
NEVER = re.compile(r"WARP_?SIZE|^WARP$")
PRAGMA_HELPER = (
    "// `#pragma unroll N` does not expand macros; _Pragma on a stringised argument does.\n"
    "#define KERNTUNE_PRAGMA_(x) _Pragma(#x)\n"
    "#define KERNTUNE_PRAGMA(x) KERNTUNE_PRAGMA_(x)\n"
)


@dataclass(frozen=True)
class Edit:
    """Replace source[start:end] with text."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Lift:
    """A literal that becomes a parameter; `key` identifies it across a kernel's two dialects."""

    key: str
    name: str
    kind: str
    default: int
    origin: str
    risk: int  # higher: likelier to change results; dropped first after a rejection
    edits: tuple[Edit, ...] = ()
    guard: bool = True  # a guard must be added (not for a #define rewritten in place)
    pragma: bool = False  # needs the _Pragma helper
    launch: bool = False  # the spec's block (and maybe grid) uses it
    bare: bool = False  # a bare `#pragma unroll`: 0 keeps it as written


def kind_of(name: str, value: int) -> str | None:
    """What a named literal tunes, from its name; None when its name says it is not a knob."""
    upper = _snake(name).upper()
    if NEVER.search(upper):
        return None
    for kind, pattern in KINDS:
        if pattern.search(upper):
            if kind == "flag" and value not in (0, 1):
                return "tile"
            return kind
    return None


def _snake(name: str) -> str:
    name = re.sub(r"^k(?=[A-Z])", "", name)  # kBlockSize -> BlockSize
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)


def macro_name(name: str) -> str:
    """The macro that carries a constexpr's value: BLOCK_SIZE for kBlockSize, kept apart from it."""
    upper = _snake(name).upper()
    return upper if upper != name else f"{name}_VALUE"


def find_lifts(source: str) -> list[Lift]:
    """Every liftable literal in one source, in order."""
    lifts: list[Lift] = []
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    unrolls = 0
    for i, line in enumerate(lines):
        m = re.match(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+(\d+)[uUlL]*[ \t]*(//[^\n]*|/\*.*\*/)?[ \t]*\n?$",
                     line)
        if m:
            name, value = m.group(1), int(m.group(2))
            kind = kind_of(name, value)
            if kind is None:
                continue
            guarded = i > 0 and re.match(rf"^\s*#\s*ifndef\s+{re.escape(name)}\b", _previous(lines, i))
            edits = () if guarded else (Edit(offsets[i], offsets[i + 1], _guard(name, value, line)),)
            lifts.append(Lift(f"define:{name}:{value}", name, kind, value, f"`#define {name} {value}` (line {i + 1})",
                              1, edits, guard=False))
            continue
        m = re.match(r"^([ \t]*)#[ \t]*pragma[ \t]+unroll(?:[ \t]+(\d+))?[ \t]*(//[^\n]*)?\n?$", line)
        if m:
            unrolls += 1
            name = "UNROLL" if unrolls == 1 else f"UNROLL_{unrolls}"
            indent = m.group(1)
            nl = "\n" if line.endswith("\n") else ""
            if m.group(2) is not None:
                n = int(m.group(2))
                text = f"{indent}KERNTUNE_PRAGMA(unroll {name}){nl}"
                lifts.append(Lift(f"unroll:{unrolls}:{n}", name, "unroll", n,
                                  f"`#pragma unroll {n}` (line {i + 1})", 0, (Edit(offsets[i], offsets[i + 1], text),),
                                  pragma=True))
            else:
                text = (f"#if {name} > 0\n{indent}KERNTUNE_PRAGMA(unroll {name})\n#else\n"
                        f"{line.rstrip(chr(10))}\n#endif" + nl)
                lifts.append(Lift(f"unroll:{unrolls}:bare", name, "unroll", 0,
                                  f"`#pragma unroll` (line {i + 1})", 0, (Edit(offsets[i], offsets[i + 1], text),),
                                  pragma=True, bare=True))
    for m in re.finditer(r"\b(?:static\s+)?constexpr\s+(?:(?:unsigned|signed|const)\s+)*"
                         r"(?:int|unsigned|long|short|size_t|u?int(?:32|64)_t|auto)\s+([A-Za-z_]\w*)\s*=\s*(\d+)[uUlL]*\s*;",
                         source):
        ident, value = m.group(1), int(m.group(2))
        kind = kind_of(ident, value)
        if kind is None:
            continue
        name = macro_name(ident)
        line = source.count("\n", 0, m.start()) + 1
        edits = (Edit(m.start(2), m.end(2), name),)
        lifts.append(Lift(f"constexpr:{ident}:{value}", name, kind, value,
                          f"`constexpr {ident} = {value}` (line {line})", 2, edits))
    return lifts


def _previous(lines: list[str], i: int) -> str:
    for j in range(i - 1, -1, -1):
        if lines[j].strip():
            return lines[j]
    return ""


def _guard(name: str, value: int, line: str) -> str:
    comment = re.search(r"(//[^\n]*|/\*.*\*/)\s*$", line.rstrip("\n"))
    head = f"{comment.group(1)}\n" if comment else ""
    return f"{head}#ifndef {name}\n#define {name} {value}\n#endif\n"


def launch_sites(source: str, literal: int) -> tuple[list[Edit], list[int]]:
    """`__launch_bounds__(L)` and `reqd_work_group_size(L, 1, 1)` sites of the block literal L,
    and the literals of any such attribute that differ from L."""
    edits, others = [], []
    attribute = r"__launch_bounds__\s*\(\s*(\d+)|reqd_work_group_size\s*\(\s*(\d+)\s*,\s*1\s*,\s*1\s*\)"
    for m in re.finditer(attribute, source):
        g = 1 if m.group(1) is not None else 2
        value = int(m.group(g))
        if value == literal:
            edits.append(Edit(m.start(g), m.end(g), "{name}"))
        else:
            others.append(value)
    return edits, others


def apply(source: str, lifts: list[Lift], launch_name: str | None = None, launch_edits: list[Edit] = (),
          launch_default: int = 0) -> str:
    """The source with the lifts' edits made and their defaults set at the top."""
    edits = [e for lift in lifts for e in lift.edits]
    edits += [replace(e, text=e.text.format(name=launch_name)) for e in launch_edits]
    out = source
    for e in sorted(edits, key=lambda e: e.start, reverse=True):
        out = out[:e.start] + e.text + out[e.end:]
    guards = [(lf.name, lf.default) for lf in lifts if lf.guard]
    if launch_name is not None and all(lf.name != launch_name for lf in lifts):
        guards.insert(0, (launch_name, launch_default))
    head = ""
    if guards:
        head += ("// kerntune: parameters lifted from the original's literals; the defaults reproduce it.\n"
                 + "".join(f"#ifndef {n}\n#define {n} {v}\n#endif\n" for n, v in guards))
    if any(lf.pragma for lf in lifts):
        head += PRAGMA_HELPER
    if not head:
        return out
    return _insert_after_prelude(out, head)


def _insert_after_prelude(source: str, text: str) -> str:
    """After the leading comments and #include lines (and #if groups of includes, typedefs and
    defines, such as one choosing the element type): before anything that could use a parameter."""
    lines = source.splitlines(keepends=True)
    pos = 0
    in_block = False
    last_include = -1
    depth = 0
    for i, line in enumerate(lines):
        s = line.strip()
        if in_block:
            in_block = "*/" not in s
            continue
        if s.startswith("/*"):
            in_block = "*/" not in s
            continue
        if not s or s.startswith("//"):
            continue
        if re.match(r"#\s*include\b", s) and depth == 0:
            last_include = i
            continue
        if re.match(r"#\s*if(n?def)?\b", s):
            depth += 1
            continue
        if depth and re.match(r"#\s*endif\b", s):
            depth -= 1
            if depth == 0:
                last_include = i
            continue
        if depth and (s.startswith("#") or s.startswith("typedef ")):
            continue
        break
    # (a group holding more than declarations ends the prelude before it: last_include is set only
    # at depth 0)
    pos = last_include + 1 if last_include >= 0 else _after_comments(lines)
    return "".join(lines[:pos]) + ("\n" if pos and lines[pos - 1].strip() else "") + text + "".join(lines[pos:])


def _after_comments(lines: list[str]) -> int:
    i = 0
    while i < len(lines) and (lines[i].strip().startswith("//") or not lines[i].strip()):
        i += 1
    return i


# value ranges ----------------------------------------------------------------------------------

def values_for(kind: str, default: int, limits: DeviceLimits, bare: bool = False) -> tuple[int, ...]:
    """The values a parameter of this kind takes on this device (the default always among them)."""
    if kind == "threads":
        low = max(32, limits.warp_size)
        vals = {1 << k for k in range(5, 16) if low <= 1 << k <= limits.max_threads_per_block}
    elif kind == "vector":
        d = max(default, 1)  # its divisors and multiples, up to 16 lanes
        vals = {v for v in (1, 2, 4, 8, 16) if (d % v == 0 or v % d == 0) and v <= 4 * d}
    elif kind == "unroll":
        vals = {0, 1, 2, 4} if bare else {1, 2, 4, 8}
    elif kind == "flag":
        vals = {0, 1}
    else:
        vals = {v for v in (default // 4, default // 2, default, default * 2, default * 4) if v >= 1}
    vals.add(default)
    return tuple(sorted(vals))


def divisibility(source: str, name: str, sizes: dict[str, str]) -> list[str]:
    """`p % NAME == 0` for each `scalar / NAME` (or `% NAME`) whose scalar is the problem size p."""
    out = []
    for m in re.finditer(rf"\b([A-Za-z_]\w*)\s*[/%]\s*{re.escape(name)}\b", source):
        size = sizes.get(m.group(1))
        if size is not None:
            out.append(f"{size} % {name} == 0")
    return list(dict.fromkeys(out))


# the proposal ----------------------------------------------------------------------------------

@dataclass
class Lifted:
    """What the rules made of an original: the proposal, and what was lifted and left alone."""

    proposal: TemplateProposal | None
    lifts: list[Lift] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def lift_template(original: Template, backend: str, limits: DeviceLimits, dropped: set[str] = frozenset()) -> Lifted:
    """The rules' template of `original`, for `backend` first; lifts named in `dropped` are left out."""
    notes: list[str] = []
    if original.parameters:
        return Lifted(_as_is(original), [], [f"{original.name} is already a template with "
                                             f"{len(original.parameters)} parameters: kept as it is"])
    primary = original.source_for(backend)
    grid, block = original_launch(original, limits)
    lifts = [lf for lf in find_lifts(primary) if lf.name not in dropped]
    taken = _words(original) | set(original.problem_names) | set(DEVICE_NAMES)
    lifts = _unique_names(lifts, taken)

    # the launch's block size
    launch_name, launch_literal, launch_grid = None, 0, False
    literal = _block_literal(block)
    if literal is not None:
        same = [lf for lf in lifts if lf.kind == "threads" and lf.default == literal]
        name = same[0].name if same else fresh_name("BLOCK", taken | {lf.name for lf in lifts})
        if name not in dropped:
            launch_name, launch_literal = name, literal
            launch_grid = any(re.search(rf"\b{literal}\b", g) for g in grid)
    sources: dict[str, str] = {}
    backends = [backend] + [b for b in sorted(original.sources) if b != backend]
    for b in backends:
        src = original.source_for(b)
        mine = lifts if b == backend else _match(lifts, find_lifts(src))
        if mine is None:
            missing = sorted({lf.name for lf in lifts} - {lf.name for lf in _common(lifts, find_lifts(src))})
            notes.append(f"the {b} source has no {', '.join(missing)} to lift: the template is for "
                         f"{', '.join(sorted(sources))} only")
            continue
        edits: list[Edit] = []
        if launch_name is not None:
            edits, others = launch_sites(src, launch_literal)
            if others:
                if b == backend:
                    notes.append(f"the launch attribute says {others[0]} threads but the spec launches "
                                 f"{launch_literal}: the block size is left alone")
                    launch_name = None
                    edits = []
                else:
                    notes.append(f"the {b} source's launch attribute ({others[0]}) differs from the spec's "
                                 f"block ({launch_literal}): the template is for {backend} only")
                    continue
        sources[b] = apply(src, mine, launch_name, edits, launch_literal)
    chosen = list(lifts)
    params: list[ParamProposal] = []
    sizes = {a.name: a.value.source for a in original.arguments
             if a.role == "scalar" and a.value is not None and a.value.source in original.problem_names}
    constraints: list[str] = []
    if launch_name is not None and all(lf.name != launch_name for lf in chosen):
        chosen.insert(0, Lift("launch", launch_name, "threads", launch_literal,
                              "the launch's block size", 3 if launch_grid else 1, launch=True))
    for lf in chosen:
        desc = {
            "threads": "threads per block",
            "vector": "elements per vector access",
            "unroll": ("unroll count (0 = as written: a bare #pragma unroll)" if lf.bare else "unroll count"),
            "flag": "on or off",
        }.get(lf.kind, "size")
        params.append(ParamProposal(lf.name, values_for(lf.kind, lf.default, limits, lf.bare), lf.default,
                                    f"{desc}; from {lf.origin}"))
        for src in sources.values():
            constraints += divisibility(src, lf.name, sizes)
    new_block = block
    new_grid = grid
    if launch_name is not None:
        new_block = [_replace_literal(block[0], launch_literal, launch_name)] + block[1:]
        if launch_grid:
            new_grid = [_replace_literal(g, launch_literal, launch_name) for g in grid]
    for lf in chosen:
        notes.append(f"lifted {lf.origin} into {lf.name}")
    if not params:
        return Lifted(None, [], notes + ["nothing to lift: no #define, constexpr, #pragma unroll count or "
                                         "launch literal with a tunable name"])
    proposal = TemplateProposal(
        sources=sources,
        parameters=tuple(params),
        constraints=tuple(dict.fromkeys(constraints)),
        grid=tuple(new_grid),
        block=tuple(new_block),
        summary=f"rules: {len(params)} literals lifted into parameters ({', '.join(p.name for p in params)})",
        notes=tuple(notes),
    )
    return Lifted(proposal, chosen, notes)


def _as_is(t: Template) -> TemplateProposal:
    return TemplateProposal(
        sources=dict(t.sources),
        parameters=tuple(ParamProposal(p.name, tuple(p.values), p.default, p.description) for p in t.parameters),
        constraints=tuple(c.text for c in t.constraints),
        grid=tuple(e.source for e in t.grid),
        block=tuple(e.source for e in t.block),
        shared_bytes=t.shared_bytes.source if t.shared_bytes is not None else None,
        summary="the template as given",
    )


def _block_literal(block: list[str]) -> int | None:
    """The thread count literal of a one-dimensional block: `256`, or the cap in `min(d / 8, 1024)`."""
    if any(b.strip() not in ("1", "(1)") for b in block[1:]):
        return None
    found = [int(x) for x in re.findall(r"(?<![\w.])(\d+)(?![\w.])", block[0]) if int(x) >= 32 and int(x) % 32 == 0]
    return max(found) if found else None


def _replace_literal(expr: str, literal: int, name: str) -> str:
    return re.sub(rf"(?<![\w.]){literal}(?![\w.])", name, expr)


def _words(t: Template) -> set[str]:
    out: set[str] = set()
    for src in t.sources.values():
        out |= set(re.findall(r"[A-Za-z_]\w*", src))
    return out


def fresh_name(name: str, taken: set[str] | frozenset[str]) -> str:
    """`name`, or a variant of it that `taken` does not hold."""
    for candidate in (name, f"{name}_SIZE", f"KT_{name}"):
        if candidate not in taken:
            return candidate
    n = 2
    while f"KT_{name}_{n}" in taken:
        n += 1
    return f"KT_{name}_{n}"


def _unique_names(lifts: list[Lift], taken: set[str]) -> list[Lift]:
    """Names for the lifts that add a macro: never one the source already uses for something else."""
    out, used = [], set()
    for lf in lifts:
        if lf.key.startswith("define:"):
            used.add(lf.name)
            out.append(lf)
            continue
        name = lf.name if lf.name not in taken and lf.name not in used else fresh_name(lf.name, taken | used)
        used.add(name)
        if name != lf.name:
            lf = replace(lf, name=name, edits=tuple(replace(e, text=e.text.replace(lf.name, name)) for e in lf.edits))
        out.append(lf)
    return out


def _common(wanted: list[Lift], found: list[Lift]) -> list[Lift]:
    keys = {lf.key for lf in found}
    return [lf for lf in wanted if lf.key in keys]


def _match(wanted: list[Lift], found: list[Lift]) -> list[Lift] | None:
    """The other dialect's own sites for the same lifts, renamed alike; None if one is missing."""
    by_key = {lf.key: lf for lf in found}
    out = []
    for w in wanted:
        f = by_key.get(w.key)
        if f is None:
            return None
        if f.name != w.name:
            f = replace(f, name=w.name, edits=tuple(replace(e, text=e.text.replace(f.name, w.name)) for e in f.edits))
        out.append(f)
    return out
