// One Jacobi step of a 5-point stencil on an H x W grid, a work-item per point; the border is copied.
__kernel void stencil5(__global const float *in, __global float *out, int H, int W) {
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x >= W || y >= H) return;
    if (x == 0 || y == 0 || x == W - 1 || y == H - 1) {
        out[y * W + x] = in[y * W + x];
        return;
    }
    out[y * W + x] = 0.5f * in[y * W + x]
                   + 0.125f * (in[(y - 1) * W + x] + in[(y + 1) * W + x] + in[y * W + x - 1] + in[y * W + x + 1]);
}
