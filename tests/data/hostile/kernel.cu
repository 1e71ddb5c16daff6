// MODE 0 correct; 1 does not compile; 2 writes half the output; 3 writes NaN;
// 4 is pruned by the constraint; 5 never ends; 6 writes out of bounds.
#ifndef MODE
#define MODE 0
#endif

extern "C" __global__ void hostile(const float *a, float *c, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
#if MODE == 1
    this is not CUDA;
#elif MODE == 2
    if (i < n / 2) c[i] = 2.0f * a[i];
#elif MODE == 3
    c[i] = (i == n - 1) ? __int_as_float(0x7fc00000) : 2.0f * a[i];
#elif MODE == 5
    volatile int spin = 1;
    while (spin) { }
    c[i] = 2.0f * a[i];
#elif MODE == 6
    c[i + (1L << 34)] = a[i];
#else
    c[i] = 2.0f * a[i];
#endif
}
