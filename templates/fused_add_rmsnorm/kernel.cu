// fused_add_rmsnorm template: residual += input; input = rmsnorm(residual) * weight, in place,
// float16 storage and float math. Defaults reproduce baseline.cu at d = 4096.
#include <cuda_fp16.h>

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

struct __align__(2 * VEC) halfvec { __half v[VEC]; };

extern "C" __global__ void __launch_bounds__(BLOCK)
fused_add_rmsnorm(__half *__restrict__ input, __half *__restrict__ residual,
                  const __half *__restrict__ weight, float eps, int tokens, int d)
{
    extern __shared__ float staged[];  // d floats when STAGE == 1
    __shared__ float partial[WARPS];
    __shared__ float scale;
    const long row = blockIdx.x;
    const int nvec = d / VEC;
    halfvec *in = reinterpret_cast<halfvec *>(input + row * d);
    halfvec *res = reinterpret_cast<halfvec *>(residual + row * d);
    const halfvec *w = reinterpret_cast<const halfvec *>(weight);
    float sum = 0.f;
PRAGMA(unroll UNROLL)
    for (int i = threadIdx.x; i < nvec; i += BLOCK) {
        const halfvec a = in[i], b = res[i];
        halfvec s;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            s.v[k] = __float2half(__half2float(a.v[k]) + __half2float(b.v[k]));
            const float xr = __half2float(s.v[k]);
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
        const halfvec ww = w[i];
        halfvec o;
#if STAGE == 0
        const halfvec x = res[i];
#endif
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
#if STAGE == 1
            const float xv = staged[i * VEC + k];
#else
            const float xv = __half2float(x.v[k]);
#endif
            o.v[k] = __float2half(xv * s * __half2float(ww.v[k]));
        }
        in[i] = o;
    }
}
