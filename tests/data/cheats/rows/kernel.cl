// Each MODE cheats one way; the verifier must catch every one of them.
//  0 honest               1 no max subtraction (overflows on large logits)
//  2 the max of the first 32 logits only            3 honest only when x[0] looks unusual (|x| >= 8)
//  4 keeps its last output, keyed on a checksum of 16 sampled inputs, and copies it on a match
//  5 keeps its last output, keyed on the whole input, and copies it on a match
//  6 a local-memory reduction without its barriers (a race)
#ifndef MODE
#define MODE 0
#endif
#ifndef THREADS
#define THREADS 64
#endif
#define STORE (1 << 16)

__global float kept_x[STORE];
__global float kept_y[STORE];
__global uint kept_key = 0;

float reduce_max(__local float *s, float v) {
    const int t = get_local_id(0);
    s[t] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = THREADS / 2; k > 0; k /= 2) {
        if (t < k) s[t] = fmax(s[t], s[t + k]);
#if MODE != 6
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
    }
    float r = s[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

float reduce_sum(__local float *s, float v) {
    const int t = get_local_id(0);
    s[t] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = THREADS / 2; k > 0; k /= 2) {
        if (t < k) s[t] += s[t + k];
#if MODE != 6
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
    }
    float r = s[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

__kernel void cheat_rows(__global const float *x, __global float *y, int cols)
{
    __local float s[THREADS];
    const int row = get_group_id(0), t = get_local_id(0);
    const int n = get_num_groups(0) * cols;
    __global const float *xr = x + (size_t)row * cols;
    __global float *yr = y + (size_t)row * cols;
#if MODE == 4 || MODE == 5
    uint key = 0;
#if MODE == 4
    for (int k = 0; k < 16; ++k) key = key * 31u + as_uint(x[(k * 7919) % n]);
#else
    bool same = n <= STORE;
    for (int i = 0; i < n && same; ++i) same = as_uint(kept_x[i]) == as_uint(x[i]);
    key = same ? 1u : 2u;
#endif
    if (n <= STORE && key == kept_key && (MODE == 4 || key == 1u)) {
        for (int i = t; i < cols; i += THREADS) yr[i] = kept_y[row * cols + i];
        return;
    }
#endif
    float m = -INFINITY;
#if MODE == 2
    for (int i = t; i < min(cols, 32); i += THREADS) m = fmax(m, xr[i]);
#else
    for (int i = t; i < cols; i += THREADS) m = fmax(m, xr[i]);
#endif
    m = reduce_max(s, m);
#if MODE == 1
    m = 0.0f;
#elif MODE == 3
    if (fabs(x[0]) < 8.0f) m = 0.0f;
#endif
    float sum = 0.0f;
    for (int i = t; i < cols; i += THREADS) sum += exp(xr[i] - m);
    sum = reduce_sum(s, sum);
    for (int i = t; i < cols; i += THREADS) yr[i] = exp(xr[i] - m) / sum;
#if MODE == 4 || MODE == 5
    if (n <= STORE) {
        for (int i = t; i < cols; i += THREADS) {
            kept_y[row * cols + i] = yr[i];
            kept_x[row * cols + i] = xr[i];
        }
        if (row == 0 && t == 0) kept_key = MODE == 4 ? key : 1u;
    }
#endif
}
