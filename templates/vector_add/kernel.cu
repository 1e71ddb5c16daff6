// c = a + b. Each thread handles ITEMS elements, BLOCK apart, so a warp's loads stay coalesced.
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ITEMS
#define ITEMS 1
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
vector_add(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ c, int n)
{
    const long base = (long)blockIdx.x * (BLOCK * ITEMS) + threadIdx.x;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const long i = base + (long)k * BLOCK;
        if (i < n) c[i] = a[i] + b[i];
    }
}
