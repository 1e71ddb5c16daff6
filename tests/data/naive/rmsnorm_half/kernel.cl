// RMSNorm on half-precision rows, one work-item per row, float arithmetic:
// out = x / sqrt(mean(x^2) + eps) * weight.
__kernel void rmsnorm_half(__global half* out, __global const half* inp, __global const half* weight, float eps,
                           int N, int C) {
    int row = get_global_id(0);
    if (row < N) {
        __global const half* x = inp + (long)row * C;
        __global half* y = out + (long)row * C;
        float ss = 0.0f;
        for (int i = 0; i < C; i++) {
            float v = vload_half(i, x);
            ss += v * v;
        }
        float scale = rsqrt(ss / C + eps);
        for (int i = 0; i < C; i++) {
            vstore_half(vload_half(i, x) * scale * vload_half(i, weight), i, y);
        }
    }
}
