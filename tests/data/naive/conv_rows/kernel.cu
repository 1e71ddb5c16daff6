// One pass of a separable convolution: a (2R+1)-tap filter along each row of an H x W image, a
// thread per output, zero outside the image (the CUDA samples' convolutionSeparable as first written).
#define KERNEL_RADIUS 4

__global__ void conv_rows(float *out, const float *in, const float *taps, int H, int W) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;
    float sum = 0.0f;
    for (int k = -KERNEL_RADIUS; k <= KERNEL_RADIUS; k++) {
        int xx = x + k;
        if (xx >= 0 && xx < W) sum += in[y * W + xx] * taps[KERNEL_RADIUS - k];
    }
    out[y * W + x] = sum;
}
