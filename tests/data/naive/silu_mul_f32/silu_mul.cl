// SwiGLU, a work-item per output element: out[t, j] = silu(x[t, j]) * x[t, d + j], float32.
__kernel void silu_and_mul(__global float *out, __global const float *x, int tokens, int d) {
    int i = get_global_id(0);
    int t = i / d;
    int j = i % d;
    if (i < tokens * d) {
        float a = x[t * 2 * d + j];
        out[i] = a / (1.0f + exp(-a)) * x[t * 2 * d + d + j];
    }
}
