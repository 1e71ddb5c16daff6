__kernel void layernorm_forward_kernel1(__global float* out, __global float* mean, __global float* rstd,
                                        __global const float* inp, __global const float* weight,
                                        __global const float* bias, int N, int C) {
    int idx = get_global_id(0);
    float eps = 1e-5f;
    if (idx < N) {
        __global const float* x = inp + idx * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) m += x[i];
        m = m / C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) { float xshift = x[i] - m; v += xshift * xshift; }
        v = v / C;
        float s = 1.0f / sqrt(v + eps);
        __global float* out_idx = out + idx * C;
        for (int i = 0; i < C; i++) out_idx[i] = s * (x[i] - m) * weight[i] + bias[i];
        mean[idx] = m;
        rstd[idx] = s;
    }
}
