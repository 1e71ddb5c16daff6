// fused_add_rmsnorm as inference engines ship it: one block per row, 16-byte vector loads,
// min(d / 8, 1024) threads, the block's sum of squares reduced through shared memory, and the
// summed row read back from global memory to normalise it.
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

extern "C" __global__ void fused_add_rmsnorm(elem_t *__restrict__ input, elem_t *__restrict__ residual,
                                             const elem_t *__restrict__ weight, float eps, int tokens, int d)
{
    __shared__ float partial[32];
    __shared__ float scale;
    const long row = blockIdx.x;
    pack8 *in = reinterpret_cast<pack8 *>(input + row * d);
    pack8 *res = reinterpret_cast<pack8 *>(residual + row * d);
    const pack8 *w = reinterpret_cast<const pack8 *>(weight);
    float sum = 0.f;
    for (int i = threadIdx.x; i < d / 8; i += blockDim.x) {
        pack8 a = in[i], b = res[i], s;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const float x = TO_F(a.v[k]) + TO_F(b.v[k]);
            s.v[k] = FROM_F(x);
            const float xr = TO_F(s.v[k]);
            sum += xr * xr;
        }
        res[i] = s;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < (blockDim.x + 31) / 32 ? partial[threadIdx.x] : 0.f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) scale = rsqrtf(v / d + eps);
    }
    __syncthreads();
    const float s = scale;
    for (int i = threadIdx.x; i < d / 8; i += blockDim.x) {
        pack8 x = res[i], ww = w[i], o;
#pragma unroll
        for (int k = 0; k < 8; ++k) o.v[k] = FROM_F(TO_F(x.v[k]) * s * TO_F(ww.v[k]));
        in[i] = o;
    }
}
