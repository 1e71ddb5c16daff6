// softmax template: probs[t, :] = softmax(logits[t, :]) over the vocabulary, float32, one block
// per row. Defaults reproduce baseline.cu at vocab >= 4096.
//
// KEEP decides where the row waits between the passes:
//   0  global memory: three passes over it (maximum, sum of exponentials, probabilities);
//   1  global memory, online: maximum and sum in one pass (the sum rescaled when the maximum
//      grows), the probabilities in a second;
//   2  shared memory: the row is read once into dynamic shared memory (vocab floats, which must
//      fit in a block's opt-in shared memory), its exponentials kept there;
//   3  registers: ITEMS vectors of VEC floats a thread (the block's registers must hold the row).
// With 2 and 3 the row is read from global memory once and each exponential computed once.
// SPLIT > 1 shares a row among that many blocks, a thread-block cluster (compute capability 9.0):
// each block keeps and writes its slice of vocab / SPLIT, and the blocks exchange their maxima and
// sums through distributed shared memory. A row too long for one block's shared memory or
// registers then still stays on chip, and a few rows still spread over many SMs.
// An entry of -inf (a masked logit) gets probability 0; a row that is entirely -inf gives NaN,
// as torch.softmax does.
#ifndef BLOCK
#define BLOCK 1024
#endif
#ifndef VEC
#define VEC 4
#endif
#ifndef KEEP
#define KEEP 0
#endif
#ifndef ITEMS
#define ITEMS 1
#endif
#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef FAST
#define FAST 0
#endif
#ifndef SPLIT
#define SPLIT 1
#endif

#define PRAGMA_(x) _Pragma(#x)
#define PRAGMA(x) PRAGMA_(x)
#define WARPS (BLOCK / 32)
#if FAST
#define EXP(x) __expf(x)
#else
#define EXP(x) expf(x)
#endif

struct __align__(4 * VEC) pack_t { float v[VEC]; };

__device__ __forceinline__ float pack_max(const pack_t &p)
{
    float m = p.v[0];
#pragma unroll
    for (int k = 1; k < VEC; ++k) m = fmaxf(m, p.v[k]);
    return m;
}

// the exponentials of p - m in place, and their sum
__device__ __forceinline__ float pack_exp(pack_t &p, float m)
{
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += (p.v[k] = EXP(p.v[k] - m));
    return s;
}

__device__ __forceinline__ pack_t pack_scale(pack_t p, float f)
{
#pragma unroll
    for (int k = 0; k < VEC; ++k) p.v[k] *= f;
    return p;
}

// exp(x - m) needs a finite m: a maximum of -inf (nothing but -inf so far) becomes 0, and every
// exp(-inf - 0) is 0.
__device__ __forceinline__ float finite(float m) { return m == -INFINITY ? 0.f : m; }

__device__ __forceinline__ float block_max(float v, float *partial)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    // every warp reduces the partials itself: no second barrier, and `partial` is not reused
    v = (threadIdx.x & 31) < WARPS ? partial[threadIdx.x & 31] : -INFINITY;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float block_sum(float v, float *partial)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    v = (threadIdx.x & 31) < WARPS ? partial[threadIdx.x & 31] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// (m, s) += (m2, s2) for the online form: s is a sum of exp(x - m)
__device__ __forceinline__ void merge(float &m, float &s, float m2, float s2)
{
    const float top = fmaxf(m, m2), f = finite(top);
    s = s * EXP(m - f) + s2 * EXP(m2 - f);
    m = top;
}

#if SPLIT > 1
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#define CLUSTER __cluster_dims__(SPLIT, 1, 1)

// Each block of the row's cluster publishes its value in its own `slot`; every block then reads
// all of them in the same order, so that all compute the same maximum and the same sum.
__device__ __forceinline__ float cluster_max(float v, float *slot)
{
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) *slot = v;
    cluster.sync();
    v = -INFINITY;
#pragma unroll
    for (int b = 0; b < SPLIT; ++b) v = fmaxf(v, *cluster.map_shared_rank(slot, b));
    return v;
}

__device__ __forceinline__ float cluster_sum(float v, float *slot)
{
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) *slot = v;
    cluster.sync();
    v = 0.f;
#pragma unroll
    for (int b = 0; b < SPLIT; ++b) v += *cluster.map_shared_rank(slot, b);
    return v;
}

__device__ __forceinline__ void cluster_merge(float &m, float &s, float *slot_m, float *slot_s)
{
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) *slot_m = m, *slot_s = s;
    cluster.sync();
    m = -INFINITY, s = 0.f;
#pragma unroll
    for (int b = 0; b < SPLIT; ++b) merge(m, s, *cluster.map_shared_rank(slot_m, b), *cluster.map_shared_rank(slot_s, b));
}
#else
#define CLUSTER
__device__ __forceinline__ float cluster_max(float v, float *) { return v; }
__device__ __forceinline__ float cluster_sum(float v, float *) { return v; }
__device__ __forceinline__ void cluster_merge(float &, float &, float *, float *) {}
#endif

extern "C" __global__ void __launch_bounds__(BLOCK) CLUSTER
softmax(const float *__restrict__ logits, float *__restrict__ probs, int tokens, int vocab)
{
    __shared__ float partial_max[WARPS], partial_sum[WARPS];
    __shared__ float slot_max, slot_sum;  // this block's share, read by the cluster's other blocks
    const long row = blockIdx.x / SPLIT;
    const int tid = threadIdx.x, slice = vocab / SPLIT, nvec = slice / VEC;
    const long start = row * vocab + (long)(blockIdx.x % SPLIT) * slice;
    const pack_t *x = reinterpret_cast<const pack_t *>(logits + start);
    pack_t *y = reinterpret_cast<pack_t *>(probs + start);
    float m = -INFINITY, s = 0.f;

#if KEEP == 0
PRAGMA(unroll UNROLL)
    for (int i = tid; i < nvec; i += BLOCK) m = fmaxf(m, pack_max(x[i]));
    m = finite(cluster_max(block_max(m, partial_max), &slot_max));
PRAGMA(unroll UNROLL)
    for (int i = tid; i < nvec; i += BLOCK) {
        pack_t p = x[i];
        s += pack_exp(p, m);
    }
    const float inv = 1.f / cluster_sum(block_sum(s, partial_sum), &slot_sum);
PRAGMA(unroll UNROLL)
    for (int i = tid; i < nvec; i += BLOCK) {
        pack_t p = x[i];
        pack_exp(p, m);
        y[i] = pack_scale(p, inv);
    }

#elif KEEP == 1
PRAGMA(unroll UNROLL)
    for (int i = tid; i < nvec; i += BLOCK) {
        pack_t p = x[i];
        const float top = fmaxf(m, pack_max(p));
        s *= EXP(m - finite(top));  // rescale to the new maximum (0 while it was -inf: s is 0)
        m = top;
        s += pack_exp(p, finite(m));
    }
    // the block's (max, sum) pairs: merged across each warp, then across the warps
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, m2, s2);
    }
    if ((tid & 31) == 0) partial_max[tid >> 5] = m, partial_sum[tid >> 5] = s;
    __syncthreads();
    m = -INFINITY, s = 0.f;
    if ((tid & 31) < WARPS) m = partial_max[tid & 31], s = partial_sum[tid & 31];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, m2, s2);
    }
    cluster_merge(m, s, &slot_max, &slot_sum);
    m = finite(m);
    const float inv = 1.f / s;
PRAGMA(unroll UNROLL)
    for (int i = tid; i < nvec; i += BLOCK) {
        pack_t p = x[i];
        pack_exp(p, m);
        y[i] = pack_scale(p, inv);
    }

#elif KEEP == 2
    extern __shared__ pack_t staged[];  // the row: vocab floats
PRAGMA(unroll UNROLL)
    for (int i = tid; i < nvec; i += BLOCK) {
        const pack_t p = x[i];
        staged[i] = p;
        m = fmaxf(m, pack_max(p));
    }
    m = finite(cluster_max(block_max(m, partial_max), &slot_max));
PRAGMA(unroll UNROLL)
    for (int i = tid; i < nvec; i += BLOCK) {  // a thread reads back only what it stored: no barrier
        pack_t p = staged[i];
        s += pack_exp(p, m);
        staged[i] = p;
    }
    const float inv = 1.f / cluster_sum(block_sum(s, partial_sum), &slot_sum);
PRAGMA(unroll UNROLL)
    for (int i = tid; i < nvec; i += BLOCK) y[i] = pack_scale(staged[i], inv);

#else
    pack_t c[ITEMS];  // the thread's share of the row, in registers
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
        const int i = tid + j * BLOCK;
        if (i < nvec) {
            c[j] = x[i];
        } else {
#pragma unroll
            for (int k = 0; k < VEC; ++k) c[j].v[k] = -INFINITY;  // exp gives 0: no effect on the sum
        }
        m = fmaxf(m, pack_max(c[j]));
    }
    m = finite(cluster_max(block_max(m, partial_max), &slot_max));
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) s += pack_exp(c[j], m);
    const float inv = 1.f / cluster_sum(block_sum(s, partial_sum), &slot_sum);
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
        const int i = tid + j * BLOCK;
        if (i < nvec) y[i] = pack_scale(c[j], inv);
    }
#endif
#if SPLIT > 1
    cg::this_cluster().sync();  // no block leaves while another may still read its slots
#endif
}
