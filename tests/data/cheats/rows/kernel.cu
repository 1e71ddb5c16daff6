// Each MODE cheats one way; the verifier must catch every one of them (the twin of kernel.cl).
//  0 honest               1 no max subtraction (overflows on large logits)
//  2 the max of the first 32 logits only            3 honest only when x[0] looks unusual (|x| >= 8)
//  4 keeps its last output, keyed on a checksum of 16 sampled inputs, and copies it on a match
//  5 keeps its last output, keyed on the whole input, and copies it on a match
//  6 a shared-memory reduction without its barriers (a race)
#ifndef MODE
#define MODE 0
#endif
#ifndef THREADS
#define THREADS 64
#endif
#define STORE (1 << 16)

__device__ float kept_x[STORE];
__device__ float kept_y[STORE];
__device__ unsigned int kept_key = 0;

__device__ float reduce_max(float *s, float v) {
    const int t = threadIdx.x;
    s[t] = v;
    __syncthreads();
    for (int k = THREADS / 2; k > 0; k /= 2) {
        if (t < k) s[t] = fmaxf(s[t], s[t + k]);
#if MODE != 6
        __syncthreads();
#endif
    }
    float r = s[0];
    __syncthreads();
    return r;
}

__device__ float reduce_sum(float *s, float v) {
    const int t = threadIdx.x;
    s[t] = v;
    __syncthreads();
    for (int k = THREADS / 2; k > 0; k /= 2) {
        if (t < k) s[t] += s[t + k];
#if MODE != 6
        __syncthreads();
#endif
    }
    float r = s[0];
    __syncthreads();
    return r;
}

extern "C" __global__ void cheat_rows(const float *x, float *y, int cols)
{
    __shared__ float s[THREADS];
    const int row = blockIdx.x, t = threadIdx.x;
    const int n = gridDim.x * cols;
    const float *xr = x + (size_t)row * cols;
    float *yr = y + (size_t)row * cols;
#if MODE == 4 || MODE == 5
    unsigned int key = 0;
#if MODE == 4
    for (int k = 0; k < 16; ++k) key = key * 31u + __float_as_uint(x[(k * 7919) % n]);
#else
    bool same = n <= STORE;
    for (int i = 0; i < n && same; ++i) same = __float_as_uint(kept_x[i]) == __float_as_uint(x[i]);
    key = same ? 1u : 2u;
#endif
    if (n <= STORE && key == kept_key && (MODE == 4 || key == 1u)) {
        for (int i = t; i < cols; i += THREADS) yr[i] = kept_y[row * cols + i];
        return;
    }
    __syncthreads();
#endif
    float m = -INFINITY;
#if MODE == 2
    for (int i = t; i < min(cols, 32); i += THREADS) m = fmaxf(m, xr[i]);
#else
    for (int i = t; i < cols; i += THREADS) m = fmaxf(m, xr[i]);
#endif
    m = reduce_max(s, m);
#if MODE == 1
    m = 0.0f;
#elif MODE == 3
    if (fabsf(x[0]) < 8.0f) m = 0.0f;
#endif
    float sum = 0.0f;
    for (int i = t; i < cols; i += THREADS) sum += expf(xr[i] - m);
    sum = reduce_sum(s, sum);
    for (int i = t; i < cols; i += THREADS) yr[i] = expf(xr[i] - m) / sum;
#if MODE == 4 || MODE == 5
    if (n <= STORE) {
        for (int i = t; i < cols; i += THREADS) {
            kept_y[row * cols + i] = yr[i];
            kept_x[row * cols + i] = xr[i];
        }
        if (row == 0 && t == 0) kept_key = MODE == 4 ? key : 1u;
    }
#endif
}
