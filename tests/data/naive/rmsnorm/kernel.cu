// RMSNorm, one thread per row: out = x / sqrt(mean(x^2) + eps) * weight (float32).
__global__ void rmsnorm(float* out, const float* inp, const float* weight, float eps, int N, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const float* x = inp + (long)row * C;
    float* y = out + (long)row * C;
    float ss = 0.0f;
    for (int i = 0; i < C; ++i) ss += x[i] * x[i];
    float scale = rsqrtf(ss / C + eps);
    for (int i = 0; i < C; ++i) y[i] = x[i] * scale * weight[i];
}
