// A polynomial of each element with its coefficients in constant memory, which the host fills
// (cudaMemcpyToSymbol in the code base; kerntune fills it before each launch).
#ifndef BLOCK
#define BLOCK 128
#endif

__constant__ float coeffs[8];

__global__ void __launch_bounds__(BLOCK) poly(float* out, const float* x, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) {
        float v = x[i], acc = 0.0f;
        for (int k = 7; k >= 0; k--) {
            acc = acc * v + coeffs[k];
        }
        out[i] = acc;
    }
}
