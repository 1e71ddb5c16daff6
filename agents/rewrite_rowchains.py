"""Independent chains a lane: the third stage of the row-wise rewrite.

A pass of an online softmax carries its maximum and its sum of exponentials from one element to
the next through an exponential (`s = s * expf(m_old - m) + expf(x - m)`): each element waits for
the one before it, and once the row is in registers (agents/rewrite_rowkeep.py) the pass is bound
by that chain's latency, not by memory. One parameter:

- `CHAINS`: independent chains a lane runs through its share of the row (1 = one, as written).
  Each chain has its own copy of every accumulator of the pass (sums, maxima, minima, the online
  pair), the lane's elements go to the chains in turn (whole packs of `VEC` elements, or a pack's
  elements, whichever is the finer), and at the end of the pass the copies are combined with the
  same combine the lanes of a group use (agents/rewrite_rowwise.py), before the group's. In effect
  a thread plays CHAINS lanes.

It applies to the passes whose accumulators are the only values carried from one element to the
next (the analysis of the first stage proves that of every row loop it accepts), and is offered for
kernels where a carried value goes through an exponential, where the chain's latency shows.
`CHAINS = 1` with `KEEP = 0` and `VEC = 1` gives the original loops token for token.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import syntax as sx

NAME = "rowwise_chains"
PREFIX = "kt_ch_"
OPS = {  # op -> (CUDA float, CUDA double, CUDA int, OpenCL any)
    "sum": ("{a} + {b}",) * 4,
    "max": ("fmaxf({a}, {b})", "fmax({a}, {b})", "max({a}, {b})", "{fmax}({a}, {b})"),
    "min": ("fminf({a}, {b})", "fmin({a}, {b})", "min({a}, {b})", "{fmin}({a}, {b})"),
}
ACC_TYPES = ("float", "double", "int")


def combine(op: str, ctype: str, dialect: str, a: str, b: str) -> str:
    """a and b combined by a sum, maximum or minimum, in the dialect's words for the type."""
    forms = OPS[op]
    if dialect == "opencl":
        real = ctype != "int"
        return forms[3].format(a=a, b=b, fmax="fmax" if real else "max", fmin="fmin" if real else "min")
    return forms[ACC_TYPES.index(ctype)].format(a=a, b=b)


def merge(ctype: str, exp: str, dialect: str, m: str, s: str, m2: str, s2: str) -> tuple[str, str]:
    """The online pairs (m, s) and (m2, s2), each s a sum of exponentials taken against its m, merged:
    the merged maximum's declaration (`top`) and the merged sum (a sum whose maximum is the
    merged one is taken as it is, so that two empty pairs, both -inf, merge to 0, not NaN)."""
    top = f"const {ctype} top = {combine('max', ctype, dialect, m, m2)};"
    return top, f"({m} == top ? {s} : {s} * {exp}({m} - top)) + ({m2} == top ? {s2} : {s2} * {exp}({m2} - top))"


@dataclass(frozen=True)
class ChainLoop:
    """A row loop's accumulators (agents/model.py's Accumulator) and where the loop's body names them."""

    accumulators: tuple
    sites: tuple[tuple[int, int, str], ...]  # (start, end, name) of each identifier naming one

    def names(self) -> list[str]:
        return [n for a in self.accumulators for n in (a.name, a.partner) if n]

    def edits(self, chain: str) -> list[tuple[int, int, str]]:
        """The body's accumulators made chain `chain`'s copies."""
        return [(s, e, f"{PREFIX}{name}[{chain}]") for s, e, name in self.sites]

    def setup(self, chains: str, ind: str) -> list[str]:
        """The copies, declared and started: the first from the accumulator, the others from the
        combine's identity (0 for a sum; the start itself for a maximum or minimum)."""
        out = []
        for a in self.accumulators:
            out += [f"{ind}{a.ctype} {PREFIX}{n}[{chains}];" for n in (a.name, a.partner) if n]
        out.append(f"#pragma unroll\n{ind}for (int kt_c = 0; kt_c < {chains}; ++kt_c) {{")
        for a in self.accumulators:
            zero = f"kt_c == 0 ? {{n}} : ({a.ctype})0"
            starts = [(a.name, zero if a.op == "sum" else "{n}")] + ([(a.partner, zero)] if a.partner else [])
            out += [f"{ind}    {PREFIX}{n}[kt_c] = {how.format(n=n)};" for n, how in starts]
        out.append(f"{ind}}}")
        return out

    def finish(self, chains: str, dialect: str, ind: str) -> list[str]:
        """The copies combined, in order, into the accumulators themselves."""
        out = [f"#pragma unroll\n{ind}for (int kt_c = 1; kt_c < {chains}; ++kt_c) {{"]
        for a in self.accumulators:
            m, c = f"{PREFIX}{a.name}[0]", f"{PREFIX}{a.name}[kt_c]"
            if a.op == "online":
                s, s2 = f"{PREFIX}{a.partner}[0]", f"{PREFIX}{a.partner}[kt_c]"
                top, total = merge(a.ctype, a.exp, dialect, m, s, c, s2)
                out += [f"{ind}    {{", f"{ind}        {top}", f"{ind}        {s} = {total};",
                        f"{ind}        {m} = top;", f"{ind}    }}"]
            else:
                out.append(f"{ind}    {m} = {combine(a.op, a.ctype, dialect, m, c)};")
        out.append(f"{ind}}}")
        out += [f"{ind}{n} = {PREFIX}{n}[0];" for n in self.names()]
        return out


def chain_loop(body, accumulators: tuple) -> ChainLoop:
    """The chain plan of a row loop whose body is `body` and whose carried values are `accumulators`
    (the first stage's analysis proved nothing else is carried, and that no name in the body is
    declared there again: those are not its accumulators)."""
    names = {n for a in accumulators for n in (a.name, a.partner) if n}
    sites = tuple((n.start_byte, n.end_byte, sx.text(n)) for n in sx.walk(body) if n.type == "identifier" and sx.text(n) in names)
    return ChainLoop(tuple(accumulators), sites)


def offered(accumulators) -> bool:
    """Whether a pass carries a value through an exponential (the online pair), where chains pay."""
    return any(a.op == "online" for a in accumulators)
