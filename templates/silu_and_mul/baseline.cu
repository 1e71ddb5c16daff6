// silu_and_mul as inference engines ship it: one block per token row, 16-byte vector loads,
// min(d / 8, 1024) threads.
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

struct __align__(16) pack8 { elem_t v[8]; };

extern "C" __global__ void silu_and_mul(elem_t *__restrict__ out, const elem_t *__restrict__ x,
                                        int tokens, int d)
{
    const long t = blockIdx.x;
    const pack8 *gate = reinterpret_cast<const pack8 *>(x + t * 2 * d);
    const pack8 *up = reinterpret_cast<const pack8 *>(x + t * 2 * d + d);
    pack8 *o = reinterpret_cast<pack8 *>(out + t * d);
    for (int i = threadIdx.x; i < d / 8; i += blockDim.x) {
        pack8 g = gate[i], u = up[i], r;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const float a = TO_F(g.v[k]);
            r.v[k] = FROM_F(a / (1.0f + expf(-a)) * TO_F(u.v[k]));
        }
        o[i] = r;
    }
}
