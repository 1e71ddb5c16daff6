// One Jacobi step of the 5-point stencil, written by hand as the bar for the naive one: each
// thread walks RY points down a column, keeping the rows above and below in registers (one new
// load per point down the column; the left and right neighbours come through the read-only
// cache), BX x BY threads a block. The same arithmetic in the same order as the naive kernel.
#ifndef BX
#define BX 32
#endif
#ifndef BY
#define BY 4
#endif
#ifndef RY
#define RY 8
#endif

extern "C" __global__ void __launch_bounds__(BX * BY) stencil5(const float *__restrict__ in, float *__restrict__ out,
                                                                int H, int W)
{
    const int x = blockIdx.x * BX + threadIdx.x;
    const int y0 = (blockIdx.y * BY + threadIdx.y) * RY;
    if (x >= W || y0 >= H) return;
    float up = y0 > 0 ? __ldg(&in[(long)(y0 - 1) * W + x]) : 0.0f;
    float mid = __ldg(&in[(long)y0 * W + x]);
#pragma unroll
    for (int r = 0; r < RY; ++r) {
        const int y = y0 + r;
        if (y >= H) break;
        const float down = y + 1 < H ? __ldg(&in[(long)(y + 1) * W + x]) : 0.0f;
        const long at = (long)y * W + x;
        if (x == 0 || y == 0 || x == W - 1 || y == H - 1) {
            out[at] = mid;
        } else {
            out[at] = 0.5f * mid + 0.125f * (up + down + __ldg(&in[at - 1]) + __ldg(&in[at + 1]));
        }
        up = mid;
        mid = down;
    }
}
