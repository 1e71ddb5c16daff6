// LayerNorm forward, one work-item per row: mean, variance, then the normalised row scaled and
// shifted; the mean and the reciprocal standard deviation are kept for the backward pass (float32).
__kernel void layernorm_forward(__global float* out, __global float* mean, __global float* rstd,
                                __global const float* inp, __global const float* weight,
                                __global const float* bias, int N, int C) {
    int idx = get_global_id(0);
    float eps = 1e-5f;
    if (idx < N) {
        __global const float* x = inp + idx * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) {
            m += x[i];
        }
        m = m / C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float xshift = x[i] - m;
            v += xshift * xshift;
        }
        v = v / C;
        float s = 1.0f / sqrt(v + eps);
        __global float* out_idx = out + idx * C;
        for (int i = 0; i < C; i++) {
            float n = s * (x[i] - m);
            out_idx[i] = n * weight[i] + bias[i];
        }
        mean[idx] = m;
        rstd[idx] = s;
    }
}
