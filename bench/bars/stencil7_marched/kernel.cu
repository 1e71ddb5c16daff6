// The 7-point stencil written by hand the 2.5-D way, the bar for the published 3-D stencils
// (tests/data/published/stencils/stencil3d.cu): a BX x BY plane of threads marches ZT planes
// along z; at each plane it stages the plane's tile with a one-point halo in shared memory (each
// thread its own point, the edge threads the halo) and keeps the planes below and above its point
// in registers (one new load a plane: the one ahead). Interior points only, the same arithmetic
// in the same order as stencil7.
#ifndef BX
#define BX 32
#endif
#ifndef BY
#define BY 8
#endif
#ifndef ZT
#define ZT 16
#endif

extern "C" __global__ void __launch_bounds__(BX * BY) stencil7(const float *__restrict__ in, float *__restrict__ out,
                                                                int nx, int ny, int nz, float c0, float c1)
{
    __shared__ float tile[BY + 2][BX + 2];
    const int i = blockIdx.x * BX + threadIdx.x;
    const int j = blockIdx.y * BY + threadIdx.y;
    const int tx = threadIdx.x + 1, ty = threadIdx.y + 1;
    const int k0 = blockIdx.z * ZT;
    const bool inside = i < nx && j < ny;
    const long plane = (long)nx * ny;
    const long at = (long)j * nx + i;
    float below = inside && k0 > 0 ? in[(k0 - 1) * plane + at] : 0.0f;
    float cur = inside && k0 < nz ? in[k0 * plane + at] : 0.0f;
    for (int k = k0; k < k0 + ZT && k < nz; ++k) {  // the same planes for every thread of the block
        const long here = k * plane + at;
        const float above = inside && k + 1 < nz ? in[here + plane] : 0.0f;
        __syncthreads();  // every thread has read the plane before from the tile
        tile[ty][tx] = cur;
        if (threadIdx.x == 0 && i > 0 && i <= nx && j < ny) tile[ty][0] = in[here - 1];
        if (threadIdx.x == BX - 1 && i + 1 < nx && j < ny) tile[ty][tx + 1] = in[here + 1];
        if (threadIdx.y == 0 && j > 0 && j <= ny && i < nx) tile[0][tx] = in[here - nx];
        if (threadIdx.y == BY - 1 && j + 1 < ny && i < nx) tile[ty + 1][tx] = in[here + nx];
        __syncthreads();
        if (i > 0 && i < nx - 1 && j > 0 && j < ny - 1 && k > 0 && k < nz - 1)
            out[here] = c0 * cur + c1 * (tile[ty][tx - 1] + tile[ty][tx + 1] + tile[ty - 1][tx] + tile[ty + 1][tx] +
                                         below + above);
        below = cur;
        cur = above;
    }
}
