// GELU (tanh approximation), a thread per element, as it is first written.
__global__ void gelu_kernel(float *out, const float *inp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + cube)));
    }
}
