// SwiGLU, a thread per output element: out[t, j] = silu(x[t, j]) * x[t, d + j], bfloat16 storage, float math.
#include <cuda_bf16.h>

__global__ void silu_and_mul(__nv_bfloat16 *out, const __nv_bfloat16 *x, int tokens, int d) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int t = i / d;
    int j = i % d;
    if (i < tokens * d) {
        float a = __bfloat162float(x[t * 2 * d + j]);
        float b = __bfloat162float(x[t * 2 * d + d + j]);
        out[i] = __float2bfloat16(a / (1.0f + expf(-a)) * b);
    }
}
