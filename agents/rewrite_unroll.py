"""UNROLL: the kernel's block-stride loops unrolled, so each thread has several loads in flight.

A kernel that gives each row to a block (`row = blockIdx.x`) walks the row in loops that step by
the block's threads: `for (c = threadIdx.x; c < cols; c += blockDim.x) s += x[row * cols + c];`.
Written so, a thread waits for each load before it issues the next; unrolled, the compiler issues
several loads before the first add (the adds stay in their order: the results do not change).
This is the one rewrite such a kernel takes whatever its body does: the loop's iterations are the
same, in the same order, and only the compiler's schedule changes. One parameter:

- `UNROLL`: 0 leaves the loops as written (the compiler's own choice), 2, 4 or 8 puts
  `#pragma unroll UNROLL` before each of the kernel's own loops that step by the block's (or the
  grid's) thread count, read global memory and have no unroll count of their own.

It applies to kernels no other rewrite restructures (an elementwise kernel's ITEMS, a row kernel's
LANES and chains already give each thread independent work), and not to a loop whose variable
indexes a local array (partial unrolling would put the array in local memory) or that shares its
line with other code (the pragma must stand right before the loop).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kerntune.engine.proposal import ParamProposal

from .kernel_tree import KernelTreeError, classify, source_tokens
from .lift import PRAGMA_HELPER, _insert_after_prelude, fresh_name

if TYPE_CHECKING:  # pragma: no cover
    from .rewrites import Declined, Rewrite, RewriteContext

NAME = "unroll"
VALUES = (0, 2, 4, 8)


def rewrite(ctx: "RewriteContext") -> "Rewrite | Declined":
    """UNROLL over the context's source, or why the kernel has no loop for it."""
    from .rewrites import Declined, Rewrite

    a = ctx.analysis
    try:  # what the kernel was before the rewrites ahead of this one restructured it
        kind = classify(ctx.original.source_for(ctx.backend), ctx.original.entry).kind
    except KernelTreeError:
        kind = a.kind
    if kind in ("elementwise", "rowwise") or a.kind in ("elementwise", "rowwise"):
        return Declined(NAME, f"the kernel is {kind if kind != 'neither' else a.kind}: its own rewrite gives "
                              "each thread independent work")
    loops = [lp for lp in a.loops if lp.in_kernel and lp.strided_by_threads and lp.pragma is None
             and lp.accesses and not lp.register_index]
    starts = []
    for lp in loops:
        line = ctx.source.rfind("\n", 0, lp.span.start) + 1
        if ctx.source[line:lp.span.start].strip() == "":
            starts.append((line, ctx.source[line:lp.span.start]))
    if not starts:
        return Declined(NAME, "no loop of the kernel steps by the block's threads over memory without an "
                              "unroll count of its own, on a line of its own")
    taken = set(ctx.taken) | set(ctx.defaults) | {w for w, _ in source_tokens(ctx.source)}
    param = fresh_name("UNROLL", taken | {"UNROLL_SIZE"})
    macro = fresh_name("KT_UNROLL", taken | {param, "KT_UNROLL_SIZE"})
    out = ctx.source
    for line, indent in sorted(starts, reverse=True):
        out = out[:line] + f"{indent}{macro}\n" + out[line:]
    helper = "" if "KERNTUNE_PRAGMA_(x)" in ctx.source else PRAGMA_HELPER
    text = (f"// kerntune: {param} > 0 unrolls the loops that step by the block's threads that many times; "
            f"0 leaves them as written\n{helper}#ifndef {param}\n#define {param} 0\n#endif\n"
            f"#if {param} > 0\n#define {macro} KERNTUNE_PRAGMA(unroll {param})\n#else\n#define {macro}\n#endif\n")
    n = len(starts)
    return Rewrite(NAME, _insert_after_prelude(out, text),
                   (ParamProposal(param, VALUES, 0, "unroll count of the loops that step by the block's threads "
                                  "(0 = as written)"),),
                   f"unroll ({param}): {n} loop{'s' if n != 1 else ''} stepping by the block's threads",
                   first={param: (0, 4)}, helps="memory")
