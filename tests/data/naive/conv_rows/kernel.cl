// One pass of a separable convolution: a (2R+1)-tap filter along each row of an H x W image, a
// work-item per output, zero outside the image.
#define KERNEL_RADIUS 4

__kernel void conv_rows(__global float *out, __global const float *in, __global const float *taps, int H, int W) {
    const int x = get_global_id(0);
    const int y = get_global_id(1);
    if (x >= W || y >= H) return;
    float sum = 0.0f;
    for (int k = -KERNEL_RADIUS; k <= KERNEL_RADIUS; k++) {
        int xx = x + k;
        if (xx >= 0 && xx < W) sum += in[y * W + xx] * taps[KERNEL_RADIUS - k];
    }
    out[y * W + x] = sum;
}
