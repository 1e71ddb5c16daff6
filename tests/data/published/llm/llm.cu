// Forward kernels of a small GPT-2 trainer in plain CUDA, the first (simplest) version of each,
// kept side by side with faster ones the way a training-from-scratch project keeps them.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>

namespace cg = cooperative_groups;

#define GELU_SCALING_FACTOR sqrtf(2.0f / M_PI)

template <class T>
__host__ __device__ T ceil_div(T dividend, T divisor) {
  return (dividend + divisor - 1) / divisor;
}

// ----------------------------------------------------------------------------
// encoder: out[b, t, :] = wte[inp[b, t], :] + wpe[t, :]

// one thread per (b, t) position, looping over the C channels
__global__ void encoder_forward_kernel1(float* out, const int* inp, const float* wte, const float* wpe,
                                        int B, int T, int C) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  int N = B * T;

  if (idx < N) {
    int b = idx / T;
    int t = idx % T;
    float* out_bt = out + b * T * C + t * C;
    int ix = inp[b * T + t];
    const float* wte_ix = wte + ix * C;
    const float* wpe_t = wpe + t * C;
    for (int i = 0; i < C; i++) {
      out_bt[i] = wte_ix[i] + wpe_t[i];
    }
  }
}

// one thread per (b, t, c) element
__global__ void encoder_forward_kernel2(float* out, const int* inp, const float* wte, const float* wpe,
                                        int B, int T, int C) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  int N = B * T * C;

  if (idx < N) {
    int bt = idx / C;
    int b = bt / T;
    int t = bt % T;
    int c = idx % C;

    int ix = inp[b * T + t];

    float* out_btc = out + b * T * C + t * C + c;
    const float* wte_ix = wte + ix * C + c;
    const float* wpe_tc = wpe + t * C + c;
    *out_btc = *wte_ix + *wpe_tc;
  }
}

// ----------------------------------------------------------------------------
// layernorm over the C channels of each of N = B * T rows; the mean and 1/std kept for backward

__global__ void layernorm_forward_kernel1(float* out, float* mean, float* rstd, const float* inp,
                                          const float* weight, const float* bias, int N, int C) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  float eps = 1e-5f;

  if (idx < N) {
    // this thread's row
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
      float n = (s * (x[i] - m));
      float o = n * weight[i] + bias[i];
      out_idx[i] = o;
    }
    mean[idx] = m;
    rstd[idx] = s;
  }
}

// ----------------------------------------------------------------------------
// softmax over the C entries of each of N rows

__global__ void softmax_forward_kernel1(float* out, const float* inp, int N, int C) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) {
    const float* inp_row = inp + i * C;
    float* out_row = out + i * C;

    float maxval = -INFINITY;
    for (int j = 0; j < C; j++) {
      if (inp_row[j] > maxval) {
        maxval = inp_row[j];
      }
    }
    double sum = 0.0;
    for (int j = 0; j < C; j++) {
      out_row[j] = expf(inp_row[j] - maxval);
      sum += out_row[j];
    }
    for (int j = 0; j < C; j++) {
      out_row[j] /= (float)sum;
    }
  }
}

// ----------------------------------------------------------------------------
// matmul: out[bt, oc] = bias[oc] + sum over c of inp[bt, c] * weight[oc, c] (weight is OC x C)

// one thread per output, on a 2-D grid of sqrt_block_size x sqrt_block_size blocks
__global__ void matmul_forward_kernel1(float* out, const float* inp, const float* weight, const float* bias,
                                       int BT, int C, int OC) {
  int bt = blockIdx.x * blockDim.x + threadIdx.x;
  int oc = blockIdx.y * blockDim.y + threadIdx.y;
  if (bt < BT && oc < OC) {
    float val = (bias != NULL) ? bias[oc] : 0.0f;
    const float* wrow = weight + oc * C;
    const float* inp_bt = inp + bt * C;
    for (int i = 0; i < C; i++) {
      val += inp_bt[i] * wrow[i];
    }
    out[bt * OC + oc] = val;
  }
}

// ----------------------------------------------------------------------------
// GELU, the tanh approximation, and the residual connection: one thread per element

__global__ void gelu_forward_kernel(float* out, const float* inp, int N) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) {
    float xi = inp[i];
    float cube = 0.044715f * xi * xi * xi;
    out[i] = 0.5f * xi * (1.0f + tanhf(GELU_SCALING_FACTOR * (xi + cube)));
  }
}

__global__ void residual_forward_kernel(float* out, const float* inp1, const float* inp2, int N) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx < N) {
    out[idx] = inp1[idx] + inp2[idx];
  }
}

// ----------------------------------------------------------------------------
// softmax with warps: each row's max and sum combined across a warp by shuffles

__device__ float warpReduceMax(float val) {
  for (int offset = 16; offset > 0; offset /= 2) {
    val = fmaxf(val, __shfl_down_sync(0xFFFFFFFF, val, offset));
  }
  return val;
}

__device__ float warpReduceSum(float val) {
  for (int offset = 16; offset > 0; offset /= 2) {
    val += __shfl_down_sync(0xFFFFFFFF, val, offset);
  }
  return val;
}

// one warp (a block of 32 threads) per row; lane 0's results broadcast to the warp
__global__ void softmax_forward_kernel3(float* out, const float* inp, int N, int C) {
  int idx = blockIdx.x;
  int tid = threadIdx.x;
  const float* x = inp + idx * C;

  float maxval = -INFINITY;
  for (int i = tid; i < C; i += blockDim.x) {
    maxval = fmaxf(maxval, x[i]);
  }
  maxval = warpReduceMax(maxval);
  float offset = __shfl_sync(0xFFFFFFFF, maxval, 0);

  float sumval = 0.0f;
  for (int i = tid; i < C; i += blockDim.x) {
    sumval += expf(x[i] - offset);
  }
  sumval = warpReduceSum(sumval);
  float sum = __shfl_sync(0xFFFFFFFF, sumval, 0);

  for (int i = tid; i < C; i += blockDim.x) {
    out[idx * C + i] = expf(x[i] - offset) / sum;
  }
}

// a warp per row again, through cooperative groups: the block cut into tiles of 32, cg::reduce
__global__ void softmax_forward_kernel4(float* out, const float* inp, int N, int C) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  int idx = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
  if (idx >= N) {
    return;
  }
  const float* x = inp + idx * C;

  float maxval = -INFINITY;
  for (int i = warp.thread_rank(); i < C; i += warp.size()) {
    maxval = fmaxf(maxval, x[i]);
  }
  maxval = cg::reduce(warp, maxval, cg::greater<float>{});

  float sumval = 0.0f;
  for (int i = warp.thread_rank(); i < C; i += warp.size()) {
    sumval += expf(x[i] - maxval);
  }
  sumval = cg::reduce(warp, sumval, cg::plus<float>{});

  float norm = 1.0f / sumval;
  for (int i = warp.thread_rank(); i < C; i += warp.size()) {
    out[idx * C + i] = expf(x[i] - maxval) * norm;
  }
}

// ----------------------------------------------------------------------------
// crossentropy: losses[b, t] = -log(probs[b, t, targets[b, t]]), a thread per position

__global__ void crossentropy_forward_kernel1(float* losses, const float* probs, const int* targets,
                                             int B, int T, int V) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < B * T) {
    int b = i / T;
    int t = i % T;
    const float* probs_bt = probs + b * T * V + t * V;
    int ix = targets[b * T + t];
    losses[b * T + t] = -logf(probs_bt[ix]);
  }
}

// ----------------------------------------------------------------------------
// launchers

void encoder_forward1(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C,
                      const int block_size) {
  const int N = B * T;
  const int grid_size = ceil_div(N, block_size);
  encoder_forward_kernel1<<<grid_size, block_size>>>(out, inp, wte, wpe, B, T, C);
}

void encoder_forward2(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C,
                      const int block_size) {
  const int N = B * T * C;
  const int grid_size = ceil_div(N, block_size);
  encoder_forward_kernel2<<<grid_size, block_size>>>(out, inp, wte, wpe, B, T, C);
}

void layernorm_forward1(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int B, int T, int C, const int block_size) {
  const int N = B * T;
  const int grid_size = ceil_div(N, block_size);
  layernorm_forward_kernel1<<<grid_size, block_size>>>(out, mean, rstd, inp, weight, bias, N, C);
}

void softmax_forward1(float* out, const float* inp, int N, int C, const int block_size) {
  const int grid_size = ceil_div(N, block_size);
  softmax_forward_kernel1<<<grid_size, block_size>>>(out, inp, N, C);
}

void matmul_forward1(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C,
                     int OC, const int sqrt_block_size) {
  dim3 gridDim(ceil_div(B * T, sqrt_block_size), ceil_div(OC, sqrt_block_size));
  dim3 blockDim(sqrt_block_size, sqrt_block_size);
  matmul_forward_kernel1<<<gridDim, blockDim>>>(out, inp, weight, bias, B * T, C, OC);
}

void gelu_forward(float* out, const float* inp, int N, const int block_size) {
  gelu_forward_kernel<<<ceil_div(N, block_size), block_size>>>(out, inp, N);
}

void residual_forward(float* out, const float* inp1, const float* inp2, int N, const int block_size) {
  residual_forward_kernel<<<ceil_div(N, block_size), block_size>>>(out, inp1, inp2, N);
}

void softmax_forward3(float* out, const float* inp, int N, int C) {
  softmax_forward_kernel3<<<N, 32>>>(out, inp, N, C);
}

void softmax_forward4(float* out, const float* inp, int N, int C, const int block_size) {
  softmax_forward_kernel4<<<ceil_div(N * 32, block_size), block_size>>>(out, inp, N, C);
}

void crossentropy_forward1(float* losses, const float* probs, const int* targets, int B, int T, int V,
                           const int block_size) {
  crossentropy_forward_kernel1<<<ceil_div(B * T, block_size), block_size>>>(losses, probs, targets, B, T, V);
}
