// RMSNorm, one work-item per row: out = x / sqrt(mean(x^2) + eps) * weight (float32).
__kernel void rmsnorm(__global float* out, __global const float* inp, __global const float* weight, float eps,
                      int N, int C) {
    int row = get_global_id(0);
    if (row >= N) return;
    __global const float* x = inp + (long)row * C;
    __global float* y = out + (long)row * C;
    float ss = 0.0f;
    for (int i = 0; i < C; ++i) ss += x[i] * x[i];
    float scale = rsqrt(ss / C + eps);
    for (int i = 0; i < C; ++i) y[i] = x[i] * scale * weight[i];
}
