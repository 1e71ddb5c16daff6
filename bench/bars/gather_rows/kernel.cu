// Embedding gather, written by hand as the bar for the naive one: out[t, :] = table[ids[t], :],
// ROWS tokens per block, each row spread over BLOCK / ROWS threads in 16-byte loads and stores
// when dim is a multiple of 4, element by element otherwise.
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ROWS
#define ROWS 2
#endif

extern "C" __global__ void __launch_bounds__(BLOCK) gather_rows(float *__restrict__ out, const int *__restrict__ ids,
                                                                 const float *__restrict__ table, int tokens, int dim)
{
    const int per = BLOCK / ROWS;
    const int t = blockIdx.x * ROWS + threadIdx.x / per;
    const int lane = threadIdx.x % per;
    if (t >= tokens) return;
    const long src = (long)__ldg(&ids[t]) * dim, dst = (long)t * dim;
    if (dim % 4 == 0) {
        const float4 *from = reinterpret_cast<const float4 *>(table + src);
        float4 *to = reinterpret_cast<float4 *>(out + dst);
        for (int c = lane; c < dim / 4; c += per) to[c] = __ldg(from + c);
    } else {
        for (int c = lane; c < dim; c += per) out[dst + c] = __ldg(&table[src + c]);
    }
}
