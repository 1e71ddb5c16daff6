// Residual add, a thread per element: out = x + residual.
__global__ void residual_add(float *out, const float *x, const float *residual, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + residual[i];
}
