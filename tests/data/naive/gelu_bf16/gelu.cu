// GELU (tanh approximation) on bfloat16, a thread per element, float math.
#include <cuda_bf16.h>

__global__ void gelu_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *inp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = __bfloat162float(inp[i]);
        float cube = 0.044715f * x * x * x;
        out[i] = __float2bfloat16(0.5f * x * (1.0f + tanhf(0.7978845608f * (x + cube))));
    }
}
