// SwiGLU on bfloat16 pairs: out = silu(gate) * up, two elements per thread through __nv_bfloat162.
#include <cuda_bf16.h>

namespace act {
__device__ __forceinline__ float silu(float x) { return x / (1.0f + __expf(-x)); }

__global__ void silu_mul_kernel(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ gate,
                                const __nv_bfloat16* __restrict__ up, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // one pair
    if (2 * i + 1 < n) {
        __nv_bfloat162 g = reinterpret_cast<const __nv_bfloat162*>(gate)[i];
        __nv_bfloat162 u = reinterpret_cast<const __nv_bfloat162*>(up)[i];
        float2 gf = __bfloat1622float2(g), uf = __bfloat1622float2(u);
        reinterpret_cast<__nv_bfloat162*>(out)[i] = __floats2bfloat162_rn(silu(gf.x) * uf.x, silu(gf.y) * uf.y);
    } else if (2 * i < n) {
        out[2 * i] = __float2bfloat16(silu(__bfloat162float(gate[2 * i])) * __bfloat162float(up[2 * i]));
    }
}
}  // namespace act
