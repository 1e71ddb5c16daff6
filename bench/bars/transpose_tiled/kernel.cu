// The bar for the naive batched transpose (tests/data/naive/transpose), written by hand as the
// efficient-transpose post does it: a 32 x 32 tile a block, padded by a column against bank
// conflicts, 32 x ROWS threads each moving 32 / ROWS elements, read along the input's rows and
// written along the output's, bounds checked for any size. The same product `scale * x` per element.
#ifndef ROWS
#define ROWS 8
#endif
#define TILE_DIM 32

extern "C" __global__ void __launch_bounds__(TILE_DIM * ROWS) transpose_scale(const float *__restrict__ in,
                                                                              float *__restrict__ out, int rows,
                                                                              int cols, float scale)
{
    __shared__ float tile[TILE_DIM][TILE_DIM + 1];
    const long plane = (long)blockIdx.z * rows * cols;
    int c = blockIdx.x * TILE_DIM + threadIdx.x;
    int r = blockIdx.y * TILE_DIM + threadIdx.y;
#pragma unroll
    for (int j = 0; j < TILE_DIM; j += ROWS)
        if (c < cols && r + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[plane + (long)(r + j) * cols + c];
    __syncthreads();
    r = blockIdx.y * TILE_DIM + threadIdx.x;  // the output's row is the input's column
    c = blockIdx.x * TILE_DIM + threadIdx.y;
#pragma unroll
    for (int j = 0; j < TILE_DIM; j += ROWS)
        if (r < rows && c + j < cols) out[plane + (long)(c + j) * rows + r] = scale * tile[threadIdx.x][threadIdx.y + j];
}
