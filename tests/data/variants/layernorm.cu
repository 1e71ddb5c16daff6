// LayerNorm forward in several variants, as code bases publish them: a thread per row first, then
// the kernels of a three-pass variant and a variant where a warp shares a row. kerntune tunes the
// kernel a spec names; the other kernels of the file never decide its template.
#include <cuda_runtime.h>

#define WARP 32

__device__ float warp_reduce_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) {
        v += __shfl_down_sync(0xffffffff, v, offset);
    }
    return v;
}

__global__ void layernorm_rows(float* out, float* mean, float* rstd, const float* inp,
                               const float* weight, const float* bias, int N, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    float eps = 1e-5f;
    if (idx < N) {
        const float* x = inp + idx * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) {
            m += x[i];
        }
        m = m / C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float xshift = x[i] - m;
            v += xshift * xshift;
        }
        v = v / C;
        float s = 1.0f / sqrtf(v + eps);
        float* out_idx = out + idx * C;
        for (int i = 0; i < C; i++) {
            float n = s * (x[i] - m);
            out_idx[i] = n * weight[i] + bias[i];
        }
        mean[idx] = m;
        rstd[idx] = s;
    }
}
// ---- the other variants ----

// the mean of each row by a block: a shared-memory tree
__global__ void mean_kernel(float* mean, const float* inp, int N, int C, int block_size) {
    extern __shared__ float shared[];
    int idx = blockIdx.x;
    int tid = threadIdx.x;
    const float* x = inp + idx * C;
    float sum = 0.0f;
    for (int i = tid; i < C; i += block_size) {
        sum += x[i];
    }
    shared[tid] = sum;
    __syncthreads();
    for (int stride = block_size / 2; stride >= 1; stride /= 2) {
        __syncthreads();
        if (tid < stride) {
            shared[tid] += shared[tid + stride];
        }
    }
    if (tid == 0) {
        mean[idx] = shared[0] / C;
    }
}

__global__ void normalization_kernel(float* out, const float* inp, const float* mean, const float* rstd,
                                     const float* weight, const float* bias, int B, int T, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int bt = idx / C;
    int c = idx % C;
    float m = mean[bt];
    float s = rstd[bt];
    float n = s * (inp[idx] - m);
    out[idx] = n * weight[c] + bias[c];
}

// a warp per row: its lanes stride over the row and meet by shuffles
__global__ void layernorm_warps(float* out, float* mean, float* rstd, const float* inp,
                                const float* weight, const float* bias, int N, int C) {
    int lane = threadIdx.x % WARP;
    int row = (blockIdx.x * blockDim.x + threadIdx.x) / WARP;
    if (row >= N) {
        return;
    }
    const float* x = inp + row * C;
    float sum = 0.0f;
#pragma unroll 4
    for (int i = lane; i < C; i += WARP) {
        sum += x[i];
    }
    float m = warp_reduce_sum(sum) / C;
    float var = 0.0f;
#pragma unroll 4
    for (int i = lane; i < C; i += WARP) {
        float d = x[i] - m;
        var += d * d;
    }
    float s = rsqrtf(warp_reduce_sum(var) / C + 1e-5f);
    float* o = out + row * C;
    for (int i = lane; i < C; i += WARP) {
        o[i] = s * (__ldcs(x + i) - m) * weight[i] + bias[i];
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}
