// Each MODE misbehaves one way; the verifier must catch every one of them.
//  0 honest: a tree of 64 partial sums in local memory (another order than the original's)
//  1 the tree without its barriers (a race)
//  2 two groups per row, the second adding into the first's result without atomics (a race)
//  3 the last five steps of the tree without barriers, "warp-synchronous" (a race)
//  4 reads one element past the end of x (the last row's sum takes it)
//  5 writes 2 MiB past the end of s (far beyond the guard regions)
//  6 every sum 2% too large
#ifndef MODE
#define MODE 0
#endif
#ifndef SPLIT
#define SPLIT 1
#endif

__kernel void cheat_sums(__global const float *x, __global float *s, int rows, int cols)
{
    __local volatile float p[64];
    const int r = get_group_id(0) / SPLIT, part = get_group_id(0) % SPLIT, t = get_local_id(0);
    const int span = cols / SPLIT;
    float acc = 0.0f;
    for (int i = part * span + t; i < (part + 1) * span; i += 64) acc += x[(size_t)r * cols + i];
#if MODE == 4
    if (r == rows - 1 && t == 0) acc += x[(size_t)rows * cols];
#endif
    p[t] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 32; k > 0; k /= 2) {
        if (t < k) p[t] += p[t + k];
#if MODE == 1
#elif MODE == 3
        if (k > 16) barrier(CLK_LOCAL_MEM_FENCE);
#else
        barrier(CLK_LOCAL_MEM_FENCE);
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
        for (volatile int spin = 0; spin < 2000; ++spin) {}
        s[r] = s[r] + total;
    }
#else
    s[r] = total;
#endif
#if MODE == 5
    if (r == 0) s[rows + (2 << 20) / 4] = total;
#endif
}
