// GELU forward, tanh approximation, as llm.c-style training code writes it; built with --use_fast_math.
#include <cuda_runtime.h>
#if defined(ENABLE_BF16)
#include <cuda_bf16.h>
typedef __nv_bfloat16 floatX;
#else
typedef float floatX;
#endif
#define GELU_SCALING_FACTOR sqrtf(2.0f / M_PI)

__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float xi = (float)inp[i];
        float cube = 0.044715f * xi * xi * xi;
        out[i] = (floatX)(0.5f * xi * (1.0f + tanhf(GELU_SCALING_FACTOR * (xi + cube))));
    }
}
