// A 3 x 3 weighted stencil (9 points, weights in w) on an H x W grid, a work-item per point; the
// border is copied.
__kernel void stencil9(__global const float *in, __global const float *w, __global float *out, int H, int W) {
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x < W && y < H) {
        if (x > 0 && y > 0 && x < W - 1 && y < H - 1) {
            float acc = 0.0f;
            for (int dy = -1; dy <= 1; dy++) {
                for (int dx = -1; dx <= 1; dx++) {
                    acc += w[(dy + 1) * 3 + (dx + 1)] * in[(y + dy) * W + (x + dx)];
                }
            }
            out[y * W + x] = acc;
        } else {
            out[y * W + x] = in[y * W + x];
        }
    }
}
