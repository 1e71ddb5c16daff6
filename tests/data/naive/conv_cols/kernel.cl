// One pass of a separable convolution: a (2R+1)-tap filter down each column of an H x W image, a
// work-item per output, zero outside the image.
#define KERNEL_RADIUS 4

__kernel void conv_cols(__global float *out, __global const float *in, __global const float *taps, int H, int W) {
    const int x = get_global_id(0);
    const int y = get_global_id(1);
    if (x >= W || y >= H) return;
    float sum = 0.0f;
    for (int k = -KERNEL_RADIUS; k <= KERNEL_RADIUS; k++) {
        int yy = y + k;
        if (yy >= 0 && yy < H) sum += in[yy * W + x] * taps[KERNEL_RADIUS - k];
    }
    out[y * W + x] = sum;
}
