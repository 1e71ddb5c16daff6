// Row softmax, one block per row, shared-memory reductions; the output is written, then rescaled.
#include <cfloat>
namespace kernels {
template <typename T, int BLOCK>
__global__ void __launch_bounds__(BLOCK) softmax_rows(T* __restrict__ out, const T* __restrict__ inp, int N, int C) {
    __shared__ float red[BLOCK];
    const T* x = inp + (long)blockIdx.x * C;
    T* y = out + (long)blockIdx.x * C;
    float mx = -FLT_MAX;
    for (int i = threadIdx.x; i < C; i += BLOCK) mx = fmaxf(mx, (float)x[i]);
    red[threadIdx.x] = mx;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    mx = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int i = threadIdx.x; i < C; i += BLOCK) { float e = expf((float)x[i] - mx); y[i] = (T)e; sum += e; }
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    float inv = 1.0f / red[0];
    for (int i = threadIdx.x; i < C; i += BLOCK) y[i] = (T)((float)y[i] * inv);
}
template __global__ void softmax_rows<float, 128>(float*, const float*, int, int);
}  // namespace kernels
