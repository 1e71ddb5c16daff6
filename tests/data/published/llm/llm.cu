// Forward kernels of a small GPT-2 trainer in plain CUDA, the first (simplest) version of each,
// kept side by side with faster ones the way a training-from-scratch project keeps them.
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>

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
