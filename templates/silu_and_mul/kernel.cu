// silu_and_mul template: out[t, i] = silu(x[t, i]) * x[t, d + i], float16 or bfloat16 in and out, float math.
// Defaults reproduce baseline.cu.
// Element type: float16, or bfloat16 with -DKT_BF16 (the library's _bf16 variants). Math is float.
#ifdef KT_BF16
#include <cuda_bf16.h>
typedef __nv_bfloat16 elem_t;
#define TO_F(x) __bfloat162float(x)
#define FROM_F(x) __float2bfloat16(x)
#else
#include <cuda_fp16.h>
typedef __half elem_t;
#define TO_F(x) __half2float(x)
#define FROM_F(x) __float2half(x)
#endif

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
#define EXP __expf
#else
#define EXP expf
#endif

// A pack of VEC halves, loaded and stored as one machine word of the same width.
#if VEC == 8
typedef uint4 raw_t;
#elif VEC == 4
typedef uint2 raw_t;
#elif VEC == 2
typedef unsigned int raw_t;
#else
typedef unsigned short raw_t;
#endif
union pack_t { raw_t raw; elem_t v[VEC]; };

// STREAM 1: every byte is used once, so load and store with the evict-first cache hints.
#if STREAM
#define LOAD(p) __ldcs(p)
#define STORE(p, x) __stcs(p, x)
#else
#define LOAD(p) (*(p))
#define STORE(p, x) (*(p) = (x))
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
silu_and_mul(elem_t *__restrict__ out, const elem_t *__restrict__ x, int tokens, int d)
{
    const int nvec = d / VEC;
#if SPLIT
    // one chunk of BLOCK packs of one row per block: no block ends a row with idle threads
    const int first = blockIdx.x * BLOCK;
    const long t0 = blockIdx.y;
#else
    const int first = 0;
    const long t0 = (long)blockIdx.x * ROWS;
#endif
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const long t = t0 + r;
        if (t >= tokens) return;
        const raw_t *gate = reinterpret_cast<const raw_t *>(x + t * 2 * d);
        const raw_t *up = reinterpret_cast<const raw_t *>(x + t * 2 * d + d);
        raw_t *o = reinterpret_cast<raw_t *>(out + t * d);
PRAGMA(unroll UNROLL)
        for (int i = first + threadIdx.x; i < (SPLIT ? min(nvec, first + BLOCK) : nvec); i += BLOCK) {
            pack_t g, u, res;
            g.raw = LOAD(gate + i);
            u.raw = LOAD(up + i);
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const float a = TO_F(g.v[k]);
                res.v[k] = FROM_F(a / (1.0f + EXP(-a)) * TO_F(u.v[k]));
            }
            STORE(o + i, res.raw);
        }
    }
}
