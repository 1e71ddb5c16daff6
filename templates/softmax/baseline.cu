// softmax over the vocabulary as a kernel engineer first writes it: one block per row of logits,
// 16-byte vector loads, min(vocab / 4, 1024) threads (a whole number of warps), and three passes
// over the row in global memory: its maximum, the sum of exp(x - max), then the probabilities.
// The two block reductions go through warp shuffles and a shared array of per-warp partials.
// A row that is entirely -inf gives NaN, as torch.softmax does.

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void softmax(const float *__restrict__ logits, float *__restrict__ probs, int tokens, int vocab)
{
    __shared__ float partial_max[32], partial_sum[32];
    const long row = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    const float4 *x = reinterpret_cast<const float4 *>(logits + row * vocab);
    float4 *y = reinterpret_cast<float4 *>(probs + row * vocab);
    const int nvec = vocab / 4;

    float m = -INFINITY;
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
        const float4 v = x[i];
        m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    }
    m = warp_max(m);
    if (lane == 0) partial_max[warp] = m;
    __syncthreads();
    m = warp_max(lane < warps ? partial_max[lane] : -INFINITY);

    float s = 0.f;
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
        const float4 v = x[i];
        s += expf(v.x - m) + expf(v.y - m) + expf(v.z - m) + expf(v.w - m);
    }
    s = warp_sum(s);
    if (lane == 0) partial_sum[warp] = s;
    __syncthreads();
    s = warp_sum(lane < warps ? partial_sum[lane] : 0.f);

    const float inv = 1.f / s;
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
        const float4 v = x[i];
        y[i] = make_float4(expf(v.x - m) * inv, expf(v.y - m) * inv, expf(v.z - m) * inv, expf(v.w - m) * inv);
    }
}
