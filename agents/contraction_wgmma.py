"""The contraction's warpgroup tensor-core variant (CUDA, compute capability 9.0): MMA = 2.

Hopper's tensor cores take their operands from shared memory through the warpgroup instructions
(`wgmma.mma_async`, PTX ISA 8.0, built for sm_90a): four warps together multiply a 64 x 16 tile of
one operand by a 16 x BN tile of the other into 64 x BN float sums held in their registers, while
the warps go on issuing. The warp fragments of MMA = 1 (`mma.sync` underneath) reach about a
quarter of what these do on an H100.

It is offered beside MMA = 1 where that one applies (two half operands, a float sum updated by
`+=` or a fused multiply-add) and the device is of compute capability 9.0:

- the block is BM / 64 warpgroups (128 threads each), each computing 64 rows of the block's
  BM x BN outputs, BN 64, 128 or 256 (one instruction's width);
- each step of BK (16, 32 or 64) stages both operands' tiles in shared memory in the layout the
  instructions read: along the index each operand walks contiguously (the depth, "K-major", or the
  row or column, "MN-major": the instruction's transpose flag says which), 16-byte chunks swizzled
  (XOR of the chunk's place in its row with the row's place in its group of eight, the pattern the
  instructions' descriptors name) so that neither the copies nor the tensor cores' reads collide
  on shared-memory banks;
- the copies are sixteen bytes at a time, asynchronous (cp.async), where eight neighbours are in
  range and aligned, else one by one (zero outside): any size is correct; STAGES tiles rotate,
  the copies of the next steps in flight while the tensor cores work on this one;
- the epilogue runs as written for each output the guard admits, straight from the registers.

The sum's order changes (16 products at a time in the tensor cores), as with MMA = 1: the gate's
calibrated tolerance judges it.
"""

from __future__ import annotations

from . import affine, contraction_mma
from .cooperate import expression_names, strip_parens
from .kernel_tree import syntax_nodes

THREADS = "128 * (BM // 64)"
WIDTHS = (64, 128, 256)  # BN: one instruction's width (n), a whole number of 64-wide swizzle rows


def declines(compute_capability: str) -> str:
    """Why the warpgroup variant does not apply on this device ("" when it does)."""
    if compute_capability.strip() != "9.0":
        return (f"compute capability {compute_capability or 'unknown'}: warpgroup tensor-core "
                "instructions (wgmma) are sm_90a's")
    return ""


def shared(s) -> str:
    """The dynamic shared memory: STAGES tiles of both operands (BK halves deep), and 1024 bytes
    to align the first to the 1024 the swizzle pattern repeats over."""
    return "STAGES * (BM + BN) * BK * 2 + 1024"


def constraints(s) -> tuple[str, ...]:
    return (
        "MMA != 2 or (BM % 64 == 0 and BN % 64 == 0 and BN <= 256 and BK % 16 == 0 and BK >= 16 and BK <= 64 "
        "and TM == 4 and TN == 8 and VEC == 1)",
        f"MMA != 2 or {THREADS} <= max_threads_per_block",
        # BN / 2 float sums a thread, and about 40 more registers for addresses and copies
        f"MMA != 2 or {THREADS} * (BN // 2 + 40) <= max_regs_per_block",
        f"MMA != 2 or {shared(s)} <= max_shared_per_block_optin",
    )


def _mode(k_fast: bool) -> str:
    """The descriptor's swizzle (1: 128-byte rows, 2: 64, 3: 32): a K-major tile's rows are BK
    halves; an MN-major tile's are always 64 halves (128 bytes)."""
    return "(BK == 64 ? 1ull : BK == 32 ? 2ull : 3ull)" if k_fast else "1ull"


def _mask(k_fast: bool) -> str:
    """Which bits of a 16-byte chunk's place in its row the swizzle flips: all the row's."""
    return "(BK / 8 - 1)" if k_fast else "7"


def _offset(k_fast: bool) -> str:
    """The byte offset, before the swizzle, of the element at (`kt_o`, `kt_q`) (row or column,
    depth) in a tile: K-major rows of BK halves; MN-major blocks of 64 along the row or column,
    each BK rows of 64 halves deep."""
    if k_fast:
        return "kt_o * (2 * BK) + kt_q * 2"
    return "(kt_o / 64) * (BK * 128) + kt_q * 128 + (kt_o % 64) * 2"


def _descriptor(k_fast: bool, tile: str, origin: str) -> str:
    """The descriptor of the 16-deep slice `kt_kk` of a tile whose first row or column is at byte
    `origin` (a warpgroup's 64 rows of A; 0 for B): K-major, the slice is 32 bytes into each row,
    groups of eight rows 16 * BK bytes apart; MN-major, 16 rows of 128 bytes further, groups of
    eight rows 1024 apart and 64-wide blocks BK * 128 apart."""
    if k_fast:
        return f"kt_desc({tile} + {origin} * (2 * BK) + kt_kk * 32, 16, 16 * BK, {_mode(True)})"
    return f"kt_desc({tile} + ({origin} / 64) * (BK * 128) + kt_kk * 2048, BK * 128, 1024, 1ull)"


def _asm(n: int, ta: int, tb: int, kind: str) -> str:
    """One m64nNk16 instruction: N / 2 float sums a thread, both operands from descriptors."""
    regs = n // 2
    outs = ", ".join(f"%{i}" for i in range(regs))
    binds = ", ".join(f'"+f"(kt_f[{i}])' for i in range(regs))
    return (f"    asm volatile(\"{{ wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{kind}.{kind} {{{outs}}}, %{regs}, %{regs + 1}, "
            f"1, 1, 1, {ta}, {tb}; }}\\n\"\n"
            f"                 : {binds}\n"
            f"                 : \"l\"(kt_a), \"l\"(kt_b));\n")


def helpers(s, vectors) -> str:
    """Descriptors, the instruction for each width, the fences and waits, under `#if MMA == 2`."""
    ta, tb = (0 if s.x_k_fast else 1), (0 if s.y_k_fast else 1)
    kind = "bf16" if vectors[0].bf16 else "f16"
    widths = "".join(f"#{'if' if i == 0 else 'elif'} BN == {n}\n{_asm(n, ta, tb, kind)}" for i, n in enumerate(WIDTHS))
    return ("#if MMA == 2\n"
            "#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)\n"
            "#error \"MMA 2 (warpgroup tensor cores) needs a build for sm_90a\"\n"
            "#endif\n"
            "__device__ __forceinline__ void kt_copy16s(unsigned kt_dst, const void *kt_src) {\n"
            "    asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\\n\" :: \"r\"(kt_dst), \"l\"(kt_src) : \"memory\");\n"
            "}\n"
            "__device__ __forceinline__ unsigned kt_smem(const void *kt_p) {\n"
            "    return (unsigned)__cvta_generic_to_shared(kt_p);\n"
            "}\n"
            # start address, leading and stride byte offsets (16-byte units, 14 bits), swizzle mode
            "__device__ __forceinline__ unsigned long long kt_desc(unsigned kt_at, unsigned kt_lead, unsigned kt_stride,\n"
            "                                                      unsigned long long kt_mode) {\n"
            "    return (unsigned long long)((kt_at & 0x3FFFF) >> 4) | ((unsigned long long)((kt_lead & 0x3FFFF) >> 4) << 16)\n"
            "           | ((unsigned long long)((kt_stride & 0x3FFFF) >> 4) << 32) | (kt_mode << 62);\n"
            "}\n"
            # the byte offset of a 16-byte chunk after the swizzle: bits 4.. flipped by bits 7..
            "__device__ __forceinline__ unsigned kt_swz(unsigned kt_x, unsigned kt_mask) {\n"
            "    return kt_x ^ ((kt_x >> 3) & (kt_mask << 4));\n"
            "}\n"
            # the registers stay where the asynchronous products write them: no copy moves across
            "__device__ __forceinline__ void kt_hold(float (&kt_f)[BN / 2]) {\n"
            "#pragma unroll\n"
            "    for (int kt_i = 0; kt_i < BN / 2; ++kt_i) asm volatile(\"\" : \"+f\"(kt_f[kt_i]) :: \"memory\");\n"
            "}\n"
            "__device__ __forceinline__ void kt_mma(float (&kt_f)[BN / 2], unsigned long long kt_a,\n"
            "                                       unsigned long long kt_b) {\n"
            f"{widths}#endif\n"
            "}\n"
            "#endif\n")


def _conjuncts(text: str) -> list[str]:
    """The conditions a `&&` chain of `text` joins (parentheses around each dropped)."""
    found = syntax_nodes(f"auto kt_e = ({text});", ("init_declarator",))
    if not found:
        return [text]
    node, text_of = found[0]
    out = []

    def walk(n) -> None:
        n = strip_parens(n)
        op = n.child_by_field_name("operator") if n.type == "binary_expression" else None
        if op is not None and op.type == "&&":
            walk(n.child_by_field_name("left"))
            walk(n.child_by_field_name("right"))
        elif text_of(n).strip() not in ("1", "true"):
            out.append(text_of(n).strip())
    walk(node.child_by_field_name("value"))
    return out


def _bounded_above(cond: str, var: str) -> bool:
    """Whether `cond` is `var < E` or `var <= E` (or `E > var`, `E >= var`) with E free of `var`:
    then eight neighbours from `var` up are all in range when the last is."""
    found = syntax_nodes(f"auto kt_e = ({cond});", ("init_declarator",))
    if not found:
        return False
    node, text_of = found[0]
    n = strip_parens(node.child_by_field_name("value"))
    op = n.child_by_field_name("operator") if n.type == "binary_expression" else None
    if op is None or op.type not in ("<", "<=", ">", ">="):
        return False
    mine, other = ("left", "right") if op.type in ("<", "<=") else ("right", "left")
    side = strip_parens(n.child_by_field_name(mine))
    return side.type == "identifier" and text_of(side) == var and var not in expression_names(
        text_of(n.child_by_field_name(other)))


def _affine(index: str, names: set[str]) -> bool:
    """Whether `index` is affine in `names`: no product of them, none squared, none inside a call."""
    try:
        p = affine.read(index, names)
    except affine.NotAffine:
        return False
    return all(sum(1 for v in m if v in names) <= 1 for m, _ in p.terms)


def _stage(tile: str, size: str, coord: str, origin: str, ctype: str, k_type: str, conds: str, k_cond: str,
           operand, k_fast: bool) -> str:
    """One operand's tile at depth kt_kb into the stage at `tile` (its shared-window address),
    swizzled: eight neighbours along the contiguous index a chunk, one asynchronous 16-byte copy
    where all eight are in range and aligned, else one by one (zero outside).

    Where every condition is free of the element's coordinates or bounds one of them above, and
    the element's index is affine in them, a step whose whole tile is in range (its last row and
    depth are) and whose chunks all start aligned (the first, the next along the other index and
    the next chunk along the contiguous one are: the index is affine) copies every chunk with no
    test at all. Otherwise, whether all eight are in range is tested cheaply where the conditions allow it: a condition
    free of the index the chunk walks holds for all eight if for the first, an upper bound on that
    index (`kt_k < K`) if for the last; any other condition is tested at each of the eight."""
    walk = "kt_k" if k_fast else coord
    if k_fast:
        o, q = "kt_g / (BK / 8)", "8 * (kt_g % (BK / 8))"
    else:
        o, q = f"8 * (kt_g % ({size} / 8))", f"kt_g / ({size} / 8)"

    def at(v: str) -> str:
        """The declarations of the element's coordinates at neighbour `v`."""
        c_step, k_step = ("", f" + {v}") if k_fast else (f" + {v}", "")
        return f"const {ctype} {coord} = {origin} + kt_o{c_step}; const {k_type} kt_k = kt_kb + kt_q{k_step};"
    element = operand.element
    parts = _conjuncts(conds) + _conjuncts(k_cond)
    coords = {coord, "kt_k"}
    free = [c for c in parts if not expression_names(c) & coords]
    whole = _affine(operand.index, coords) and all(
        c in free or any(_bounded_above(c, v) and not expression_names(c) & (coords - {v}) for v in coords)
        for c in parts)
    once = [c for c in parts if walk not in expression_names(c)]
    last = [c for c in parts if c not in once and _bounded_above(c, walk)]
    each = [c for c in parts if c not in once and c not in last]
    joined = lambda cs: " && ".join(f"({c})" for c in cs) or "true"  # noqa: E731
    ind = "            "
    loop = (f"{ind}#pragma unroll\n"
            f"{ind}for (int kt_j = 0; kt_j < KT_CEIL({size} * BK / 8, KT_THREADS); ++kt_j) {{\n"
            f"{ind}    const int kt_g = kt_t + kt_j * KT_THREADS;\n"
            f"{ind}    if (({size} * BK / 8) % KT_THREADS != 0 && kt_g >= {size} * BK / 8) break;\n"
            f"{ind}    const int kt_o = {o}, kt_q = {q};\n"
            f"{ind}    const unsigned kt_ds = {tile} + kt_swz({_offset(k_fast)}, {_mask(k_fast)});\n")
    if whole:
        # the tile's last row (column) and depth, then its first element and the next along each index
        last_at = (f"const {ctype} {coord} = {origin} + {size} - 1; const {k_type} kt_k = kt_kb + BK - 1;")
        first_at = f"const {ctype} {coord} = {origin}; const {k_type} kt_k = kt_kb;"
        other_at = (f"const {ctype} {coord} = {origin} + 1; const {k_type} kt_k = kt_kb;" if k_fast
                    else f"const {ctype} {coord} = {origin}; const {k_type} kt_k = kt_kb + 1;")
        next_at = (f"const {ctype} {coord} = {origin}; const {k_type} kt_k = kt_kb + 8;" if k_fast
                   else f"const {ctype} {coord} = {origin} + 8; const {k_type} kt_k = kt_kb;")
        bounded = [c for c in parts if c not in free]
        aligned = f"((unsigned long)&{element} & 15) == 0"
        fast = (f"{ind}{{  // one operand's tile: whole and aligned, or chunk by chunk\n"
                f"{ind}bool kt_whole;\n"
                f"{ind}{{ {last_at} kt_whole = {joined(bounded)}; }}\n"
                f"{ind}{{ {first_at} kt_whole = kt_whole && {joined(free)} && {aligned}; }}\n"
                f"{ind}{{ {other_at} kt_whole = kt_whole && {aligned}; }}\n"
                f"{ind}{{ {next_at} kt_whole = kt_whole && {aligned}; }}\n"
                f"{ind}if (kt_whole) {{\n"
                + loop.replace(f"\n{ind}", f"\n{ind}    ").replace(f"{ind}#pragma", f"{ind}    #pragma", 1)
                + f"{ind}        {{ {at('0')} kt_copy16s(kt_ds, &{element}); }}\n"
                f"{ind}    }}\n"
                f"{ind}}} else\n")
    else:
        fast = ""
    out = fast + (f"{ind}#pragma unroll\n"
           f"{ind}for (int kt_j = 0; kt_j < KT_CEIL({size} * BK / 8, KT_THREADS); ++kt_j) {{\n"
           f"{ind}    const int kt_g = kt_t + kt_j * KT_THREADS;\n"
           f"{ind}    if (({size} * BK / 8) % KT_THREADS != 0 && kt_g >= {size} * BK / 8) break;\n"
           f"{ind}    const int kt_o = {o}, kt_q = {q};\n"
           f"{ind}    const unsigned kt_ds = {tile} + kt_swz({_offset(k_fast)}, {_mask(k_fast)});\n"
           f"{ind}    bool kt_all;\n"
           f"{ind}    {{ {at('0')} kt_all = {joined(once)} && ((unsigned long)&{element} & 15) == 0; }}\n")
    if last:
        out += f"{ind}    {{ {at('7')} kt_all = kt_all && {joined(last)}; }}\n"
    if each:
        out += (f"{ind}#pragma unroll\n"
                f"{ind}    for (int kt_v = 0; kt_v < 8; ++kt_v) {{ {at('kt_v')} kt_all = kt_all && {joined(each)}; }}\n")
    return out + (f"{ind}    if (kt_all) {{\n"
                  f"{ind}        {at('0')}\n"
                  f"{ind}        kt_copy16s(kt_ds, &{element});\n"
                  f"{ind}        continue;\n"
                  f"{ind}    }}\n"
                  f"{ind}    {operand.storage} *kt_d = reinterpret_cast<{operand.storage} *>(kt_bp + (kt_ds - kt_s0));\n"
                  f"{ind}#pragma unroll\n"
                  f"{ind}    for (int kt_v = 0; kt_v < 8; ++kt_v) {{\n"
                  f"{ind}        {at('kt_v')}\n"
                  f"{ind}        kt_d[kt_v] = ({conds} && ({k_cond})) ? {element} : {operand.zero};\n"
                  f"{ind}    }}\n"
                  f"{ind}}}\n") + (f"{ind}}}\n" if whole else "")


def body(s, vectors, r_ok: str, c_ok: str, epilogue: str, x_ok: str = "", y_ok: str = "") -> str:
    """The warpgroup kernel's body (between the braces), for `#if MMA == 2`.

    STAGES tiles of each operand rotate through shared memory. A step waits for its own copies,
    orders them before the tensor cores' reads (a proxy fence: the copies are ordinary writes, the
    instructions read through the asynchronous proxy) and meets the block at one barrier; it then
    issues its BK / 16 products, refills the stage the step before computed from (every warpgroup
    waited for its products before that barrier) and waits for its products."""
    x, y = vectors
    stage = (_stage("kt_ua", "BM", "kt_r", "kt_r0", s.r_type, s.k_type, x_ok or r_ok, s.k_cond, x, s.x_k_fast)
             + _stage("kt_ub", "BN", "kt_c", "kt_c0", s.c_type, s.k_type, y_ok or c_ok, s.k_cond, y, s.y_k_fast))
    refill = (f"        if ({s.kb_cond.replace('kt_kb', 'kt_kl')}) {{\n"
              f"            const {s.k_type} kt_kb = kt_kl;\n"
              f"            const unsigned kt_ua = kt_s0 + kt_sl * KT_STAGE, kt_ub = kt_ua + BM * BK * 2;\n"
              f"{stage}        }}\n"
              "        kt_commit();\n"
              "        kt_kl += BK;\n"
              "        kt_sl = (kt_sl + 1) % STAGES;\n")
    a = _descriptor(s.x_k_fast, "kt_sa", "64 * kt_wg")
    b = _descriptor(s.y_k_fast, "kt_sb", "0")
    start = "" if s.acc_init.replace(" ", "") in contraction_mma.ZEROS else f"({s.acc_init}) + "
    return f"""#define KT_STAGE ((BM + BN) * BK * 2)
    extern __shared__ __align__(128) unsigned char kt_sm[];  // the launch's: SHARED bytes, see above
    // the tiles start at the first 1024-byte boundary: the swizzle repeats over 1024 bytes
    const unsigned kt_s0 = (kt_smem(kt_sm) + 1023u) & ~1023u;
    unsigned char *kt_bp = kt_sm + (kt_s0 - kt_smem(kt_sm));
    const int kt_t = threadIdx.x, kt_wg = kt_t / 128, kt_wi = (kt_t % 128) / 32, kt_l = kt_t % 32;
    const {s.r_type} kt_r0 = ({s.r_type})blockIdx.y * BM;
    const {s.c_type} kt_c0 = ({s.c_type})blockIdx.x * BN;
    float kt_f[BN / 2];
#pragma unroll
    for (int kt_i = 0; kt_i < BN / 2; ++kt_i) kt_f[kt_i] = 0.0f;
{contraction_mma.rotation(s, refill)}#else
{refill}        kt_wait<0>();
#endif
        asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");
        __syncthreads();
        const unsigned kt_sa = kt_s0 + kt_sc * KT_STAGE, kt_sb = kt_sa + BM * BK * 2;
        asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");
#pragma unroll
        for (int kt_kk = 0; kt_kk < BK / 16; ++kt_kk) kt_mma(kt_f, {a}, {b});
        asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");
#if STAGES > 1
{refill}#endif
        asm volatile("wgmma.wait_group.sync.aligned 0;\\n" ::: "memory");
#if STAGES == 1
        __syncthreads();
#endif
        kt_sc = (kt_sc + 1) % STAGES;
    }}
    kt_wait<0>();
    asm volatile("wgmma.wait_group.sync.aligned 0;\\n" ::: "memory");
    kt_hold(kt_f);
#pragma unroll
    for (int kt_j = 0; kt_j < BN / 8; ++kt_j) {{
#pragma unroll
        for (int kt_e = 0; kt_e < 4; ++kt_e) {{
            const {s.r_type} kt_r = kt_r0 + 64 * kt_wg + 16 * kt_wi + kt_l / 4 + 8 * (kt_e / 2);
            const {s.c_type} kt_c = kt_c0 + 8 * kt_j + 2 * (kt_l % 4) + kt_e % 2;
            if ({r_ok} && {c_ok}) {{
                float kt_v = {start}kt_f[4 * kt_j + kt_e];
{epilogue}
            }}
        }}
    }}
#undef KT_STAGE
"""
