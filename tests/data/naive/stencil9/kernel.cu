// A 3 x 3 weighted stencil (9 points, weights in w, row by row) on an H x W grid, a thread per
// point, the neighbourhood walked by two loops; the border is copied.
__global__ void stencil9(const float *in, const float *w, float *out, int H, int W) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
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
