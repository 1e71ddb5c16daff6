// SwiGLU, a thread per output element: out[t, j] = silu(x[t, j]) * x[t, d + j], half storage, float math.
#include <cuda_fp16.h>

__global__ void silu_and_mul(half *out, const half *x, int tokens, int d) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int t = i / d;
    int j = i % d;
    if (i < tokens * d) {
        float a = __half2float(x[t * 2 * d + j]);
        float b = __half2float(x[t * 2 * d + d + j]);
        out[i] = __float2half(a / (1.0f + expf(-a)) * b);
    }
}
