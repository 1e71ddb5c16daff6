// One Jacobi step of a 5-point stencil on an H x W grid, a thread per point: an interior point
// becomes half itself plus an eighth of each of its four neighbours; the border is copied.
__global__ void stencil5(const float *in, float *out, int H, int W) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;
    if (x == 0 || y == 0 || x == W - 1 || y == H - 1) {
        out[y * W + x] = in[y * W + x];
        return;
    }
    out[y * W + x] = 0.5f * in[y * W + x]
                   + 0.125f * (in[(y - 1) * W + x] + in[(y + 1) * W + x] + in[y * W + x - 1] + in[y * W + x + 1]);
}
