// SwiGLU, a work-item per output element: out[t, j] = silu(x[t, j]) * x[t, d + j], half storage
// through vload_half / vstore_half (no fp16 extension needed), float math.
__kernel void silu_and_mul(__global half *out, __global const half *x, int tokens, int d) {
    int i = get_global_id(0);
    int t = i / d;
    int j = i % d;
    if (i < tokens * d) {
        float a = vload_half(t * 2 * d + j, x);
        float b = vload_half(t * 2 * d + d + j, x);
        vstore_half(a / (1.0f + exp(-a)) * b, i, out);
    }
}
