// MODE 0 correct; 1 does not compile; 2 writes half the output; 3 writes NaN;
// 4 is pruned by the constraint; 5 never ends; 7 runs 1024-thread blocks; 6 writes through a wild pointer.
#ifndef MODE
#define MODE 0
#endif
#ifndef THREADS
#define THREADS 64
#endif

__kernel void hostile(__global const float *a, __global float *c, int n)
{
    const int i = get_group_id(0) * THREADS + get_local_id(0);
    if (i >= n) return;
#if MODE == 1
    this is not OpenCL C;
#elif MODE == 2
    if (i < n / 2) c[i] = 2.0f * a[i];
#elif MODE == 3
    c[i] = (i == n - 1) ? NAN : 2.0f * a[i];
#elif MODE == 5
    volatile int spin = 1;
    while (spin) { }
    c[i] = 2.0f * a[i];
#elif MODE == 6
    __global float *wild = (__global float *)((ulong)0x10);
    wild[i * 4096] = a[i];
    c[i] = 2.0f * a[i];
#else
    c[i] = 2.0f * a[i];
#endif
}
