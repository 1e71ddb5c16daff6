// One pass of a separable convolution: a (2R+1)-tap filter down each column of an H x W image, a
// thread per output, zero outside the image (the CUDA samples' convolutionSeparable as first written).
#define KERNEL_RADIUS 4

__global__ void conv_cols(float *out, const float *in, const float *taps, int H, int W) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;
    float sum = 0.0f;
    for (int k = -KERNEL_RADIUS; k <= KERNEL_RADIUS; k++) {
        int yy = y + k;
        if (yy >= 0 && yy < H) sum += in[yy * W + x] * taps[KERNEL_RADIUS - k];
    }
    out[y * W + x] = sum;
}
