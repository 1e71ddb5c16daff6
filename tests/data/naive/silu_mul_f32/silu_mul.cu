// SwiGLU, a thread per output element: out[t, j] = silu(x[t, j]) * x[t, d + j], float32.
__global__ void silu_and_mul(float *out, const float *x, int tokens, int d) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int t = i / d;
    int j = i % d;
    if (i < tokens * d) {
        float a = x[t * 2 * d + j];
        out[i] = a / (1.0f + expf(-a)) * x[t * 2 * d + d + j];
    }
}
