// Per-block partial sums of 256 elements, written by hand as the bar for the naive tree
// reductions: a group of LANES threads per segment, 16-byte loads through the read-only path,
// then shuffles; BLOCK threads per block.
#ifndef LANES
#define LANES 32
#endif
#ifndef BLOCK
#define BLOCK 256
#endif
#define SEG 256

extern "C" __global__ void __launch_bounds__(BLOCK) block_sums(const float *__restrict__ in, float *__restrict__ out,
                                                                int n)
{
    const int lane = threadIdx.x % LANES;
    const long seg = ((long)blockIdx.x * BLOCK + threadIdx.x) / LANES;
    const long segs = ((long)n + SEG - 1) / SEG;
    const long base = seg * SEG;
    float acc = 0.0f;
    if (seg < segs) {
        if (base + SEG <= n) {
            const float4 *p = reinterpret_cast<const float4 *>(in + base);
#pragma unroll
            for (int u = 0; u < SEG / 4 / LANES; ++u) {
                const float4 v = __ldg(p + u * LANES + lane);
                acc += (v.x + v.y) + (v.z + v.w);
            }
        } else {
            for (int t = lane; t < SEG; t += LANES)
                if (base + t < n) acc += in[base + t];
        }
    }
#pragma unroll
    for (int off = LANES / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off, LANES);
    if (seg < segs && lane == 0) out[seg] = acc;
}
