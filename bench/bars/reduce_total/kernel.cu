// out[0] += sum(x), written by hand as the bar for the naive atomic reduction: GRID blocks per
// multiprocessor stride over x in 16-byte loads (4 in flight per thread), shuffles within each
// warp, shared memory across the block's warps, one atomic per block.
#ifndef BLOCK
#define BLOCK 512
#endif
#ifndef GRID
#define GRID 4
#endif

extern "C" __global__ void __launch_bounds__(BLOCK) reduce_total(const float *__restrict__ x, float *out, int n)
{
    __shared__ float warps[BLOCK / 32];
    const long n4 = n / 4;
    const long stride = (long)gridDim.x * BLOCK;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    float acc = 0.0f;
    long i = (long)blockIdx.x * BLOCK + threadIdx.x;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        const float4 a = __ldg(x4 + i), b = __ldg(x4 + i + stride), c = __ldg(x4 + i + 2 * stride),
                     d = __ldg(x4 + i + 3 * stride);
        acc += ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w)) + ((c.x + c.y) + (c.z + c.w)) +
               ((d.x + d.y) + (d.z + d.w));
    }
    for (; i < n4; i += stride) {
        const float4 a = __ldg(x4 + i);
        acc += (a.x + a.y) + (a.z + a.w);
    }
    for (long t = 4 * n4 + (long)blockIdx.x * BLOCK + threadIdx.x; t < n; t += stride) acc += x[t];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < BLOCK / 32 ? warps[threadIdx.x] : 0.0f;
#pragma unroll
        for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (threadIdx.x == 0) atomicAdd(out, acc);
    }
}
