// Each MODE cheats one way; the verifier must catch every one of them.
//  0 honest             1 skips when its output is not NaN (it was written by an earlier launch)
//  2 half the blocks skip when the output is not NaN      3 a quarter of the blocks do
//  4 computes only when it finds one fixed poison pattern (all-ones bytes)
//  5 honest for its first 6 launches, then skips half the blocks
//  6 honest for its first 6 launches, then skips a quarter of the blocks
//  7 writes one element past the end of c     8 writes one element before the start of c
//  9 writes its input a after computing c    10 correct only when n is a multiple of THREADS
// 11 honest for its first 13 launches (its verification and timing), then wrong: caught when
//    the leaders are launched again and again
#ifndef MODE
#define MODE 0
#endif
#ifndef THREADS
#define THREADS 64
#endif

__device__ unsigned int launches = 0;

extern "C" __global__ void cheats(float *a, float *c, int n)
{
    const int group = blockIdx.x;
    const int i = group * THREADS + threadIdx.x;
    if (i == 0) atomicAdd(&launches, 1u);
    const unsigned int count = *(volatile unsigned int *)&launches;
    if (i >= n) return;
    float v = 2.0f * a[i];
#if MODE == 0
    float acc = 0.0f;
    for (int k = 0; k < 16; ++k) acc += sinf(v * (float)k);
    v += (acc == 12345.0f) ? 1.0f : 0.0f;
#endif
#if MODE == 1
    if (!isnan(c[i])) return;
#elif MODE == 2
    if (group % 2 == 0 && !isnan(c[i])) return;
#elif MODE == 3
    if (group % 4 == 0 && !isnan(c[i])) return;
#elif MODE == 4
    if (__float_as_uint(c[i]) != 0xFFFFFFFFu) return;
#elif MODE == 5
    if (count > 6 && group % 2 == 0) return;
#elif MODE == 6
    if (count > 6 && group % 4 == 0) return;
#elif MODE == 7
    if (i == n - 1) c[n] = v;
#elif MODE == 8
    if (i == 0) c[-1] = v;
#elif MODE == 10
    if (i >= (n / THREADS) * THREADS) return;
#elif MODE == 11
    if (count > 13) v += 1.0f;
#endif
    c[i] = v;
#if MODE == 9
    a[i] = v;
#endif
}
