// Row softmax on bfloat16 rows, one thread per row, float arithmetic, three passes over the input.
#include <cuda_bf16.h>

__global__ void softmax_bf16(__nv_bfloat16* out, const __nv_bfloat16* inp, int N, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < N) {
        const __nv_bfloat16* x = inp + (long)row * C;
        __nv_bfloat16* y = out + (long)row * C;
        float maxval = -INFINITY;
        for (int i = 0; i < C; i++) {
            maxval = fmaxf(maxval, __bfloat162float(x[i]));
        }
        float sum = 0.0f;
        for (int i = 0; i < C; i++) {
            sum += __expf(__bfloat162float(x[i]) - maxval);
        }
        float inv = 1.0f / sum;
        for (int i = 0; i < C; i++) {
            y[i] = __float2bfloat16(__expf(__bfloat162float(x[i]) - maxval) * inv);
        }
    }
}
