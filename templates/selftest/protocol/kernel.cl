// kerntune selftest: each MODE but 0 defeats one defence of the verification protocol.
//  0 honest (with some arithmetic more, so that MODE 9 is the fastest until it is caught)
//  1 skips when its output is not NaN (an earlier launch wrote it)
//  2 a quarter of the blocks skip when their output is not NaN
//  3 computes only when it finds one fixed poison pattern (all-ones bytes)
//  4 counts its launches: honest for its first 6, then skips half the blocks
//  5 writes one element past the end of c         6 writes one element before the start of c
//  7 writes its input a                           8 drops the tail: correct only for multiples of 64
//  9 honest for its first 12 launches, then wrong (caught by a later check of its launches)
// 10 memoises: stores its first launch's outputs and replays them from its third launch on
#ifndef MODE
#define MODE 0
#endif
#ifndef TWIN
#define TWIN 0
#endif
#define THREADS 64
#define MEMO 4096

__global uint launches = 0;
__global float memo[MEMO];

__kernel void selftest(__global float *a, __global float *c, int n)
{
    const int group = get_group_id(0);
    const int i = group * THREADS + get_local_id(0);
    if (get_global_id(0) == 0) atomic_inc(&launches);
    const uint count = launches;
    if (i >= n) return;
    float v = 2.0f * a[i];
#if MODE == 0
    float acc = 0.0f;
    for (int k = 0; k < 4; ++k) acc += sin(v * (float)k);
    v += (acc == 12345.0f) ? 1.0f : 0.0f;
#elif MODE == 1
    if (!isnan(c[i])) return;
#elif MODE == 2
    if (group % 4 == 0 && !isnan(c[i])) return;
#elif MODE == 3
    if (as_uint(c[i]) != 0xFFFFFFFFu) return;
#elif MODE == 4
    if (count > 6 && group % 2 == 0) return;
#elif MODE == 5
    if (i == n - 1) c[n] = v;
#elif MODE == 6
    if (i == 0) c[-1] = v;
#elif MODE == 8
    if (i >= (n / THREADS) * THREADS) return;
#elif MODE == 9
    if (count > 12) v += 1.0f;
#elif MODE == 10
    if (count > 2 && i < MEMO) { c[i] = memo[i]; return; }
    if (i < MEMO) memo[i] = v;
#endif
    c[i] = v;
#if MODE == 7
    a[i] = v;
#endif
}
