// fused_add_rmsnorm template: residual += input; input = rmsnorm(residual) * weight, in place,
// float16 storage and float math. Defaults reproduce baseline.cu at d = 4096.
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
#define BLOCK 512
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef STAGE
#define STAGE 0
#endif
#ifndef UNROLL
#define UNROLL 1
#endif

// `#pragma unroll N` does not expand macros; _Pragma on a stringised argument does.
#define PRAGMA_(x) _Pragma(#x)
#define PRAGMA(x) PRAGMA_(x)
#define WARPS ((BLOCK + 31) / 32)

struct __align__(2 * VEC) pack_t { elem_t v[VEC]; };

extern "C" __global__ void __launch_bounds__(BLOCK)
fused_add_rmsnorm(elem_t *__restrict__ input, elem_t *__restrict__ residual,
                  const elem_t *__restrict__ weight, float eps, int tokens, int d)
{
    extern __shared__ float staged[];  // d floats when STAGE == 1
    __shared__ float partial[WARPS];
    __shared__ float scale;
    const long row = blockIdx.x;
    const int nvec = d / VEC;
    pack_t *in = reinterpret_cast<pack_t *>(input + row * d);
    pack_t *res = reinterpret_cast<pack_t *>(residual + row * d);
    const pack_t *w = reinterpret_cast<const pack_t *>(weight);
    float sum = 0.f;
PRAGMA(unroll UNROLL)
    for (int i = threadIdx.x; i < nvec; i += BLOCK) {
        const pack_t a = in[i], b = res[i];
        pack_t s;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            s.v[k] = FROM_F(TO_F(a.v[k]) + TO_F(b.v[k]));
            const float xr = TO_F(s.v[k]);
            sum += xr * xr;
#if STAGE == 1
            staged[i * VEC + k] = xr;
#endif
        }
        res[i] = s;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < WARPS ? partial[threadIdx.x] : 0.f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) scale = rsqrtf(v / d + eps);
    }
    __syncthreads();
    const float s = scale;
PRAGMA(unroll UNROLL)
    for (int i = threadIdx.x; i < nvec; i += BLOCK) {
        const pack_t ww = w[i];
        pack_t o;
#if STAGE == 0
        const pack_t x = res[i];
#endif
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
#if STAGE == 1
            const float xv = staged[i * VEC + k];
#else
            const float xv = TO_F(x.v[k]);
#endif
            o.v[k] = FROM_F(xv * s * TO_F(ww.v[k]));
        }
        in[i] = o;
    }
}
