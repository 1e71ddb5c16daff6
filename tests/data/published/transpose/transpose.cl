// The transpose's steps in OpenCL: a TILE_DIM x TILE_DIM tile a work-group of TILE_DIM x BLOCK_ROWS
// work-items, through __local memory for the coalesced versions; the matrix square, its side the
// number of groups times TILE_DIM. A last version takes any width and height.

#define TILE_DIM 32
#define BLOCK_ROWS 8

__kernel void copy(__global float *odata, __global const float *idata) {
    int x = get_group_id(0) * TILE_DIM + get_local_id(0);
    int y = get_group_id(1) * TILE_DIM + get_local_id(1);
    int width = get_num_groups(0) * TILE_DIM;

    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        odata[(y + j) * width + x] = idata[(y + j) * width + x];
}

__kernel void transposeNaive(__global float *odata, __global const float *idata) {
    int x = get_group_id(0) * TILE_DIM + get_local_id(0);
    int y = get_group_id(1) * TILE_DIM + get_local_id(1);
    int width = get_num_groups(0) * TILE_DIM;

    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        odata[x * width + (y + j)] = idata[(y + j) * width + x];
}

__kernel void transposeCoalesced(__global float *odata, __global const float *idata) {
    __local float tile[TILE_DIM][TILE_DIM];

    int x = get_group_id(0) * TILE_DIM + get_local_id(0);
    int y = get_group_id(1) * TILE_DIM + get_local_id(1);
    int width = get_num_groups(0) * TILE_DIM;

    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        tile[get_local_id(1) + j][get_local_id(0)] = idata[(y + j) * width + x];

    barrier(CLK_LOCAL_MEM_FENCE);

    x = get_group_id(1) * TILE_DIM + get_local_id(0);
    y = get_group_id(0) * TILE_DIM + get_local_id(1);

    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        odata[(y + j) * width + x] = tile[get_local_id(0)][get_local_id(1) + j];
}

__kernel void transposeNoBankConflicts(__global float *odata, __global const float *idata) {
    __local float tile[TILE_DIM][TILE_DIM + 1];

    int x = get_group_id(0) * TILE_DIM + get_local_id(0);
    int y = get_group_id(1) * TILE_DIM + get_local_id(1);
    int width = get_num_groups(0) * TILE_DIM;

    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        tile[get_local_id(1) + j][get_local_id(0)] = idata[(y + j) * width + x];

    barrier(CLK_LOCAL_MEM_FENCE);

    x = get_group_id(1) * TILE_DIM + get_local_id(0);
    y = get_group_id(0) * TILE_DIM + get_local_id(1);

    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        odata[(y + j) * width + x] = tile[get_local_id(0)][get_local_id(1) + j];
}

__kernel void transposeNaiveBounds(__global float *odata, __global const float *idata, int width, int height) {
    int x = get_group_id(0) * TILE_DIM + get_local_id(0);
    int y = get_group_id(1) * TILE_DIM + get_local_id(1);

    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        if (x < width && (y + j) < height) {
            odata[x * height + (y + j)] = idata[(y + j) * width + x];
        }
    }
}
