// silu_and_mul template: out[t, i] = silu(x[t, i]) * x[t, d + i], float16 in and out, float math.
// Defaults reproduce baseline.cu.
#include <cuda_fp16.h>

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

// `#pragma unroll N` does not expand macros; _Pragma on a stringised argument does.
#define PRAGMA_(x) _Pragma(#x)
#define PRAGMA(x) PRAGMA_(x)

#if FAST_EXP
#define EXP __expf
#else
#define EXP expf
#endif

struct __align__(2 * VEC) halfvec { __half v[VEC]; };

extern "C" __global__ void __launch_bounds__(BLOCK)
silu_and_mul(__half *__restrict__ out, const __half *__restrict__ x, int tokens, int d)
{
    const int nvec = d / VEC;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const long t = (long)blockIdx.x * ROWS + r;
        if (t >= tokens) return;
        const halfvec *gate = reinterpret_cast<const halfvec *>(x + t * 2 * d);
        const halfvec *up = reinterpret_cast<const halfvec *>(x + t * 2 * d + d);
        halfvec *o = reinterpret_cast<halfvec *>(out + t * d);
PRAGMA(unroll UNROLL)
        for (int i = threadIdx.x; i < nvec; i += BLOCK) {
            const halfvec g = gate[i], u = up[i];
            halfvec res;
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const float a = __half2float(g.v[k]);
                res.v[k] = __float2half(a / (1.0f + EXP(-a)) * __half2float(u.v[k]));
            }
            o[i] = res;
        }
    }
}
