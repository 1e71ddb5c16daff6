#define BLOCK 128
__kernel void __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
softmax_rows(__global float* restrict out, __global const float* restrict inp, int N, int C) {
    __local float red[BLOCK];
    int t = get_local_id(0);
    __global const float* x = inp + (long)get_group_id(0) * C;
    __global float* y = out + (long)get_group_id(0) * C;
    float mx = -FLT_MAX;
    for (int i = t; i < C; i += BLOCK) mx = fmax(mx, x[i]);
    red[t] = mx;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = BLOCK / 2; s > 0; s /= 2) {
        if (t < s) red[t] = fmax(red[t], red[t + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    mx = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    float sum = 0.0f;
    for (int i = t; i < C; i += BLOCK) { float e = exp(x[i] - mx); y[i] = e; sum += e; }
    red[t] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = BLOCK / 2; s > 0; s /= 2) {
        if (t < s) red[t] += red[t + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float inv = 1.0f / red[0];
    for (int i = t; i < C; i += BLOCK) y[i] = y[i] * inv;
}
