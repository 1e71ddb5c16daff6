"""The contraction's tensor-core variant (CUDA): a product of two half operands summed in float,
computed by warp matrix fragments (`nvcuda::wmma`, 16 x 16 x 16 half products added in float).

It is offered beside the register-blocked kernel as MMA = 1 where the analysis shows:

- both operands are one half element each (`__half2float(A[i])` or the half itself), so a tile of
  each can be staged in shared memory as halves, as stored;
- the sum is a float updated by `+=` or a fused multiply-add (a start other than zero, a bias read
  at the output, is added to the fragments' sum in the epilogue: one more reordering of the sum);
- the backend is CUDA and the device (where known) has tensor cores (compute capability 7.0 on).

The block's BM x BN tile is cut into warp tiles of 8 TM x 8 TN outputs, (TM / 2) x (TN / 2) fragments
of 16 x 16 (so the register-blocked kernel's usual TM and TN, 4 and 8, give the usual warp tiles:
32 x 32 to 64 x 64, four to sixteen warps a 128 x 128 block); each
step of BK (a multiple of 16) stages the operands' tiles in shared memory, eight neighbours at a
time as one 16-byte word where they are in range and aligned (else one by one, zero outside;
asynchronous copies from compute capability 8.0, STAGES tiles in rotation so the copies of the
next steps are in flight while a step computes),
each tile laid out along the index its operand walks contiguously (the fragment's row or column
order follows). The epilogue runs as written for each output the guard admits, reading the sum
from a warp's 16 x 16 scratch. The sum's order changes (16 products at a time inside the tensor
core): the gate's calibrated tolerance judges it, as it judges any reordering of a float sum.
"""

from __future__ import annotations

ZEROS = frozenset({"0", "0.0", "0.f", "0.0f", "0.F", "0.0F", "0.", "(0)", "(0.0f)", "0.0e0", "0e0"})
FMA = frozenset({"fmaf", "fma", "__fmaf_rn", "__fma_rn"})
FRAGMENT = "nvcuda::wmma::fragment"


def declines(backend: str, compute_capability: str, s, vectors) -> str:
    """Why the tensor-core variant does not apply ("" when it does)."""
    if backend != "cuda":
        return "tensor-core fragments are CUDA's"
    major = compute_capability.split(".")[0] if compute_capability else ""
    if major.isdigit() and int(major) < 7:
        return f"compute capability {compute_capability} has no tensor cores"
    if not all(v is not None and v.half for v in vectors):
        return "an operand is not one half element"
    if vectors[0].bf16 != vectors[1].bf16:
        return "one operand is a half, the other a bfloat16"
    if vectors[0].bf16 and major.isdigit() and int(major) < 8:
        return f"compute capability {compute_capability} has no bfloat16 tensor cores"
    if s.acc_type != "float":
        return f"the sum is a {s.acc_type}, not a float"
    if s.update != "+=" and s.update not in FMA:
        return f"the sum is updated by `{s.update}`"
    return ""


_HELPERS = ("#if MMA\n"
           "#include <mma.h>\n"
           "KT_THREADS_MMA"
           # sixteen bytes global -> shared: asynchronous (cp.async) from compute capability 8.0,
           # a plain copy through registers before it; commit/wait order the asynchronous groups
           "__device__ __forceinline__ void kt_copy16(void *kt_dst, const void *kt_src) {\n"
           "#if __CUDA_ARCH__ >= 800\n"
           "    unsigned kt_s;\n"
           "    asm volatile(\"{ .reg .u64 kt_a; cvta.to.shared.u64 kt_a, %1; cvt.u32.u64 %0, kt_a; }\\n\" "
           ": \"=r\"(kt_s) : \"l\"(kt_dst));\n"
           "    asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\\n\" :: \"r\"(kt_s), \"l\"(kt_src) : \"memory\");\n"
           "#else\n"
           "    *reinterpret_cast<uint4 *>(kt_dst) = *reinterpret_cast<const uint4 *>(kt_src);\n"
           "#endif\n"
           "}\n"
           "__device__ __forceinline__ void kt_commit() {\n"
           "#if __CUDA_ARCH__ >= 800\n"
           "    asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\");\n"
           "#endif\n"
           "}\n"
           "template <int KT_N> __device__ __forceinline__ void kt_wait() {\n"
           "#if __CUDA_ARCH__ >= 800\n"
           "    asm volatile(\"cp.async.wait_group %0;\\n\" :: \"n\"(KT_N) : \"memory\");\n"
           "#endif\n"
           "}\n"
           "#else\n"
           "#define KT_THREADS ((BM / TM) * (BN / TN))\n"
           "#endif\n")


def helpers(warpgroups: bool = False) -> str:
    """The helpers' text: the threads a block (with `warpgroups`, MMA = 2's too), the copies."""
    threads = ("#define KT_WARPS ((BM / (8 * TM)) * (BN / (8 * TN)))\n"
               "#define KT_THREADS (32 * KT_WARPS)\n")
    if warpgroups:
        threads = f"#if MMA == 2\n#define KT_THREADS (128 * (BM / 64))\n#else\n{threads}#endif\n"
    return _HELPERS.replace("KT_THREADS_MMA", threads)

THREADS = "32 * (BM // (8 * TM)) * (BN // (8 * TN))"
STAGES = (1, 2, 3)  # four would not fit the space's enumeration beside the lifted launch


def shared(s) -> str:
    """The bytes of dynamic shared memory the tensor-core kernel takes: its stages' tiles (each
    laid out along the index its operand walks contiguously, 8 halves of padding a row), or the
    warps' 16 x 16 float scratch of the epilogue, which reuses them, whichever is larger."""
    a = "BM * (BK + 8)" if s.x_k_fast else "BK * (BM + 8)"
    b = "BN * (BK + 8)" if s.y_k_fast else "BK * (BN + 8)"
    return f"max(STAGES * ({a} + {b}) * 2, (BM // (8 * TM)) * (BN // (8 * TN)) * 1024)"


def constraints(s, warpgroups: bool = False) -> tuple[str, ...]:
    """With `warpgroups`, MMA = 2's tiles take three stages too, and their own shapes."""
    return (
        "MMA == 0 or " + ("MMA == 2 or " if warpgroups else "")
        + "(BK > 0 and BK % 16 == 0 and TM % 2 == 0 and TN % 2 == 0 and BM % (8 * TM) == 0 "
        "and BN % (8 * TN) == 0 and VEC == 1)",
        "MMA > 0 or STAGES <= 2" if warpgroups else "MMA == 1 or STAGES <= 2",
        f"MMA {'!= 1' if warpgroups else '== 0'} or {THREADS} <= max_threads_per_block",
        # dynamic shared memory: past the 48 KiB of static arrays, up to the device's opt-in limit
        f"MMA {'!= 1' if warpgroups else '== 0'} or {shared(s)} <= max_shared_per_block_optin",
    )


def shared_bytes(s, switch: str, original: str) -> str:
    """The launch's dynamic shared memory: the tiles' with MMA, else the original's."""
    return f"({shared(s)}) if {switch} > 0 and MMA == 1 else ({original})"


def _tile(size: str, k_fast: bool) -> tuple[str, str]:
    """A stage's shared tile dimensions (staged along the index its operand walks contiguously) and
    the element a fragment starts at, over `kt_q` (the depth) and `kt_p` (the row or column)."""
    if k_fast:
        return f"[{size}][BK + 8]", "[kt_p][kt_q]"
    return f"[BK][{size} + 8]", "[kt_q][kt_p]"


def _stage(tile: str, size: str, coord: str, origin: str, ctype: str, k_type: str, conds: str, k_cond: str,
           operand, k_fast: bool) -> str:
    """One operand's tile at depth kt_kb into stage kt_sb of shared memory: groups of eight
    neighbours along the contiguous index, one 16-byte copy (asynchronous where the device has
    cp.async) where all eight are in range and aligned, else one by one (zero outside)."""
    element = operand.element
    if k_fast:
        o, q, at = "kt_g / (BK / 8)", "8 * (kt_g % (BK / 8))", f"&{tile}[kt_sb][kt_o][kt_q]"
        step = ("", " + kt_v")
    else:
        o, q, at = f"8 * (kt_g % ({size} / 8))", f"kt_g / ({size} / 8)", f"&{tile}[kt_sb][kt_q][kt_o]"
        step = (" + kt_v", "")
    ind = "            "
    return (f"{ind}for (int kt_g = kt_t; kt_g < {size} * BK / 8; kt_g += KT_THREADS) {{\n"
            f"{ind}    const int kt_o = {o}, kt_q = {q};\n"
            f"{ind}    {operand.storage} *kt_d = {at};\n"
            f"{ind}    bool kt_in[8], kt_all = true;\n"
            f"{ind}#pragma unroll\n"
            f"{ind}    for (int kt_v = 0; kt_v < 8; ++kt_v) {{\n"
            f"{ind}        const {ctype} {coord} = {origin} + kt_o{step[0]};\n"
            f"{ind}        const {k_type} kt_k = kt_kb + kt_q{step[1]};\n"
            f"{ind}        kt_in[kt_v] = {conds} && ({k_cond});\n"
            f"{ind}        kt_all = kt_all && kt_in[kt_v];\n"
            f"{ind}    }}\n"
            f"{ind}    {{\n"
            f"{ind}        const {ctype} {coord} = {origin} + kt_o;\n"
            f"{ind}        const {k_type} kt_k = kt_kb + kt_q;\n"
            f"{ind}        if (kt_all && ((unsigned long)&{element} & 15) == 0) {{\n"
            f"{ind}            kt_copy16(kt_d, &{element});\n"
            f"{ind}            continue;\n"
            f"{ind}        }}\n"
            f"{ind}    }}\n"
            f"{ind}#pragma unroll\n"
            f"{ind}    for (int kt_v = 0; kt_v < 8; ++kt_v) {{\n"
            f"{ind}        const {ctype} {coord} = {origin} + kt_o{step[0]};\n"
            f"{ind}        const {k_type} kt_k = kt_kb + kt_q{step[1]};\n"
            f"{ind}        kt_d[kt_v] = kt_in[kt_v] ? {element} : {operand.zero};\n"
            f"{ind}    }}\n"
            f"{ind}}}\n")


def rotation(s, refill: str) -> str:
    """The start of STAGES shared tiles in rotation: the copies of the first STAGES - 1 steps
    (`refill` each), then the steps' loop, whose first act (STAGES > 1) waits for its own."""
    return (f"    {s.k_type} kt_kl = {s.start};  // the depth the next copies read\n"
            "    int kt_sl = 0, kt_sc = 0;  // the stage the next copies fill, the stage this step computes\n"
            "    for (int kt_p0 = 0; kt_p0 < STAGES - 1; ++kt_p0) {\n"
            f"{refill}    }}\n"
            f"    for ({s.k_type} kt_kb0 = {s.start}; {s.kb_cond.replace('kt_kb', 'kt_kb0')}; kt_kb0 += BK) {{\n"
            "#if STAGES > 1\n"
            "        kt_wait<STAGES - 2>();\n")


def body(s, vectors, r_ok: str, c_ok: str, epilogue: str, x_ok: str = "", y_ok: str = "") -> str:
    """The tensor-core kernel's body (between the braces), for `#if MMA`.

    STAGES tiles of each operand rotate through shared memory: while a step's fragments compute
    from one, the copies of the next STAGES - 1 steps are in flight (STAGES = 1: load, wait,
    compute). One barrier a step: the stage a step refills is the one every warp finished in the
    step before. The epilogue's scratch reuses the tiles once the last step is done. An operand's
    elements are loaded where `x_ok` (`y_ok`) holds, the guard's `r_ok` (`c_ok`) where none is
    given; the epilogue runs where the guard admits the output."""
    x, y = vectors
    a_dims, a_at = _tile("BM", s.x_k_fast)
    b_dims, b_at = _tile("BN", s.y_k_fast)
    # a tile along k is row-major for A (M x K) and column-major for B (K x N), and the other way
    a_layout = "row_major" if s.x_k_fast else "col_major"
    b_layout = "col_major" if s.y_k_fast else "row_major"
    a_ld = "BK + 8" if s.x_k_fast else "BM + 8"
    b_ld = "BK + 8" if s.y_k_fast else "BN + 8"
    a_ptr = "&kt_ah[kt_sc]" + a_at.replace("kt_p", "kt_wm * 8 * TM + 16 * kt_m")
    b_ptr = "&kt_bh[kt_sc]" + b_at.replace("kt_p", "kt_wn * 8 * TN + 16 * kt_n")
    stage = (_stage("kt_ah", "BM", "kt_r", "kt_r0", s.r_type, s.k_type, x_ok or r_ok, s.k_cond, x, s.x_k_fast)
             + _stage("kt_bh", "BN", "kt_c", "kt_c0", s.c_type, s.k_type, y_ok or c_ok, s.k_cond, y,
                      s.y_k_fast))
    # the copies of the step at depth kt_kl into stage kt_sl (none past the loop's end), one group
    refill = (f"        if ({s.kb_cond.replace('kt_kb', 'kt_kl')}) {{\n"
              f"            const {s.k_type} kt_kb = kt_kl;\n"
              f"            const int kt_sb = kt_sl;\n"
              f"{stage}        }}\n"
              "        kt_commit();\n"
              "        kt_kl += BK;\n"
              "        kt_sl = (kt_sl + 1) % STAGES;\n")
    w = "nvcuda::wmma"
    # a sum that starts elsewhere than at zero (a bias at the output) takes its start last
    start = "" if s.acc_init.replace(" ", "") in ZEROS else f"({s.acc_init}) + "
    return f"""    typedef {x.storage} kt_at{a_dims};
    typedef {x.storage} kt_bt{b_dims};
    extern __shared__ __align__(128) unsigned char kt_sm[];  // the launch's: SHARED bytes, see above
    kt_at *kt_ah = reinterpret_cast<kt_at *>(kt_sm);
    kt_bt *kt_bh = reinterpret_cast<kt_bt *>(kt_sm + STAGES * sizeof(kt_at));
    float (*kt_cs)[16][16] = reinterpret_cast<float (*)[16][16]>(kt_sm);
    const int kt_t = threadIdx.x, kt_w = kt_t / 32, kt_l = kt_t % 32;
    const int kt_wm = kt_w / (BN / (8 * TN)), kt_wn = kt_w % (BN / (8 * TN));
    const {s.r_type} kt_r0 = ({s.r_type})blockIdx.y * BM;
    const {s.c_type} kt_c0 = ({s.c_type})blockIdx.x * BN;
    {FRAGMENT}<{w}::accumulator, 16, 16, 16, float> kt_f[TM / 2][TN / 2];
#pragma unroll
    for (int kt_m = 0; kt_m < TM / 2; ++kt_m)
#pragma unroll
        for (int kt_n = 0; kt_n < TN / 2; ++kt_n) {w}::fill_fragment(kt_f[kt_m][kt_n], 0.0f);
{rotation(s, refill)}        __syncthreads();
#endif
{refill}#if STAGES == 1
        kt_wait<0>();
        __syncthreads();
#endif
#pragma unroll
        for (int kt_q = 0; kt_q < BK; kt_q += 16) {{
            {FRAGMENT}<{w}::matrix_a, 16, 16, 16, {x.storage}, {w}::{a_layout}> kt_fa[TM / 2];
            {FRAGMENT}<{w}::matrix_b, 16, 16, 16, {x.storage}, {w}::{b_layout}> kt_fb[TN / 2];
#pragma unroll
            for (int kt_m = 0; kt_m < TM / 2; ++kt_m) {w}::load_matrix_sync(kt_fa[kt_m], {a_ptr}, {a_ld});
#pragma unroll
            for (int kt_n = 0; kt_n < TN / 2; ++kt_n) {w}::load_matrix_sync(kt_fb[kt_n], {b_ptr}, {b_ld});
#pragma unroll
            for (int kt_m = 0; kt_m < TM / 2; ++kt_m)
#pragma unroll
                for (int kt_n = 0; kt_n < TN / 2; ++kt_n) {w}::mma_sync(kt_f[kt_m][kt_n], kt_fa[kt_m], kt_fb[kt_n], kt_f[kt_m][kt_n]);
        }}
#if STAGES == 1
        __syncthreads();
#endif
        kt_sc = (kt_sc + 1) % STAGES;
    }}
    kt_wait<0>();
    __syncthreads();  // every warp is done with the tiles: the scratch may reuse them
#pragma unroll
    for (int kt_m = 0; kt_m < TM / 2; ++kt_m) {{
#pragma unroll
        for (int kt_n = 0; kt_n < TN / 2; ++kt_n) {{
            {w}::store_matrix_sync(&kt_cs[kt_w][0][0], kt_f[kt_m][kt_n], 16, {w}::mem_row_major);
            __syncwarp();
            for (int kt_e = kt_l; kt_e < 256; kt_e += 32) {{
                const {s.r_type} kt_r = kt_r0 + kt_wm * 8 * TM + 16 * kt_m + kt_e / 16;
                const {s.c_type} kt_c = kt_c0 + kt_wn * 8 * TN + 16 * kt_n + kt_e % 16;
                if ({r_ok} && {c_ok}) {{
                    float kt_v = {start}kt_cs[kt_w][kt_e / 16][kt_e % 16];
{epilogue}
                }}
            }}
            __syncwarp();
        }}
    }}
"""
