// Matrix transpose through a local-memory tile (the CUDA samples' transposeCoalesced, in OpenCL).
#define TILE_DIM 32
#define BLOCK_ROWS 8

__kernel void transposeCoalesced(__global float *odata, __global const float *idata, int width, int height)
{
    __local float tile[TILE_DIM][TILE_DIM + 1];
    int x = get_group_id(0) * TILE_DIM + get_local_id(0);
    int y = get_group_id(1) * TILE_DIM + get_local_id(1);
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        if (x < width && y + j < height)
            tile[get_local_id(1) + j][get_local_id(0)] = idata[(y + j) * width + x];
    barrier(CLK_LOCAL_MEM_FENCE);
    x = get_group_id(1) * TILE_DIM + get_local_id(0);
    y = get_group_id(0) * TILE_DIM + get_local_id(1);
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        if (x < height && y + j < width)
            odata[(y + j) * height + x] = tile[get_local_id(0)][get_local_id(1) + j];
}
