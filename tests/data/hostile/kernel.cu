// MODE 0 correct; 1 does not compile; 2 writes half the output; 3 writes NaN;
// 4 is pruned by the constraint; 5 never ends; 7 runs 1024-thread blocks; 6 writes out of bounds.
#ifndef MODE
#define MODE 0
#endif
#ifndef THREADS
#define THREADS 64
#endif

extern "C" __global__ void hostile(const float *a, float *c, int n)
{
    const int i = blockIdx.x * THREADS + threadIdx.x;
    if (i >= n) return;
#if MODE == 1
    this is not CUDA;
#elif MODE == 2
    if (i < n / 2) c[i] = 2.0f * a[i];
#elif MODE == 3
    c[i] = (i == n - 1) ? __int_as_float(0x7fc00000) : 2.0f * a[i];
#elif MODE == 5
    // clock64() is never negative, and the compiler cannot know it
    for (;;) {
        if (clock64() < 0) break;
    }
    c[i] = 2.0f * a[i];
#elif MODE == 6
    c[i + (1L << 34)] = a[i];
#elif MODE == 7
    // 96 live accumulators: more registers than 1024 threads per block can have
    float acc[96];
#pragma unroll
    for (int k = 0; k < 96; ++k) acc[k] = a[(i + k * 131) % n];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
#pragma unroll
        for (int k = 0; k < 96; ++k) acc[k] = acc[k] * acc[(k + r + 1) % 96] + 1e-3f;
    }
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 96; ++k) s += acc[k];
    c[i] = (s == 12345.f) ? 0.f : 2.0f * a[i];
#else
    c[i] = 2.0f * a[i];
#endif
}
