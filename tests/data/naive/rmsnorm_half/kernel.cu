// RMSNorm on half-precision rows, one thread per row, float arithmetic:
// out = x / sqrt(mean(x^2) + eps) * weight.
#include <cuda_fp16.h>

__global__ void rmsnorm_half(__half* out, const __half* inp, const __half* weight, float eps, int N, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < N) {
        const __half* x = inp + (long)row * C;
        __half* y = out + (long)row * C;
        float ss = 0.0f;
        for (int i = 0; i < C; i++) {
            float v = __half2float(x[i]);
            ss += v * v;
        }
        float scale = rsqrtf(ss / C + eps);
        for (int i = 0; i < C; i++) {
            y[i] = __float2half(__half2float(x[i]) * scale * __half2float(weight[i]));
        }
    }
}
