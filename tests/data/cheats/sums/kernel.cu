// Each MODE misbehaves one way; the verifier must catch every one of them (the twin of kernel.cl).
//  0 honest: a tree of 64 partial sums in shared memory (another order than the original's)
//  1 the tree without its barriers (a race between the block's two warps)
//  2 two blocks per row, the second adding into the first's result without atomics (a race)
//  3 the last five steps of the tree without __syncwarp, warp-synchronous (a race)
//  4 reads one element past the end of x (the last row's sum takes it)
//  5 writes 2 MiB past the end of s (far beyond the guard regions)
//  6 every sum 2% too large
#ifndef MODE
#define MODE 0
#endif
#ifndef SPLIT
#define SPLIT 1
#endif

extern "C" __global__ void cheat_sums(const float *x, float *s, int rows, int cols)
{
    __shared__ float p[64];
    const int r = blockIdx.x / SPLIT, part = blockIdx.x % SPLIT, t = threadIdx.x;
    const int span = cols / SPLIT;
    float acc = 0.0f;
    for (int i = part * span + t; i < (part + 1) * span; i += 64) acc += x[(size_t)r * cols + i];
#if MODE == 4
    if (r == rows - 1 && t == 0) acc += x[(size_t)rows * cols];
#endif
    p[t] = acc;
#if MODE != 1
    __syncthreads();
#endif
    for (int k = 32; k > 0; k /= 2) {
        if (t < k) p[t] += p[t + k];
#if MODE == 1
#elif MODE == 3
        if (k > 16) __syncthreads();
#else
        __syncthreads();
#endif
    }
    if (t != 0) return;
    float total = p[0];
#if MODE == 6
    total *= 1.02f;
#endif
#if MODE == 2
    if (part == 0) {
        s[r] = total;
    } else {
        s[r] = s[r] + total;
    }
#else
    s[r] = total;
#endif
#if MODE == 5
    if (r == 0) s[rows + (2 << 20) / 4] = total;
#endif
}
