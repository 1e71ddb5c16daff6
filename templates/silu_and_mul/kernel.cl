// silu_and_mul template for OpenCL: half storage through vload_half / vstore_half (no fp16
// extension needed), float math.
#ifndef BLOCK
#define BLOCK 1024
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef ROWS
#define ROWS 1
#endif
#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef FAST_EXP
#define FAST_EXP 0
#endif
// STREAM selects cache hints in the CUDA source; OpenCL has none, so it changes nothing here.
#ifndef STREAM
#define STREAM 0
#endif
#ifndef SPLIT
#define SPLIT 0
#endif

// `#pragma unroll N` does not expand macros; _Pragma on a stringised argument does.
#define PRAGMA_(x) _Pragma(#x)
#define PRAGMA(x) PRAGMA_(x)

#if FAST_EXP
#define EXP native_exp
#else
#define EXP exp
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if VEC == 1
typedef float vfloat;
#define VLOAD(i, p) vload_half(i, p)
#define VSTORE(v, i, p) vstore_half(v, i, p)
#else
typedef CAT(float, VEC) vfloat;
#define VLOAD(i, p) CAT(vload_half, VEC)(i, p)
#define VSTORE(v, i, p) CAT(vstore_half, VEC)(v, i, p)
#endif

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void silu_and_mul(__global half *out, __global const half *x, int tokens, int d)
{
    const int nvec = d / VEC;
#if SPLIT
    const int first = get_group_id(0) * BLOCK;
    const long t0 = get_group_id(1);
    const int end = min(nvec, first + BLOCK);
#else
    const int first = 0;
    const long t0 = (long)get_group_id(0) * ROWS;
    const int end = nvec;
#endif
    for (int r = 0; r < ROWS; ++r) {
        const long t = t0 + r;
        if (t >= tokens) return;
        const long gate = t * 2 * nvec;  // offsets in units of VEC halves
        const long up = gate + nvec;
        const long o = t * nvec;
PRAGMA(unroll UNROLL)
        for (int i = first + get_local_id(0); i < end; i += BLOCK) {
            const vfloat g = VLOAD(gate + i, x);
            const vfloat u = VLOAD(up + i, x);
            VSTORE(g / (1.0f + EXP(-g)) * u, o + i, out);
        }
    }
}
