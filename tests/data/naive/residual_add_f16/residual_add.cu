// Residual add on half, a thread per element: out = x + residual.
#include <cuda_fp16.h>

__global__ void residual_add(half *out, const half *x, const half *residual, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = __hadd(x[i], residual[i]);
    }
}
