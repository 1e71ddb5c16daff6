// A square-tiled matrix product as textbooks write it: the work-group is TILE_WIDTH x TILE_WIDTH.
#define TILE_WIDTH 16
__kernel void matmul_tiled(__global const float *A, __global const float *B, __global float *C, int N) {
    __local float As[TILE_WIDTH][TILE_WIDTH];
    __local float Bs[TILE_WIDTH][TILE_WIDTH];
    int row = get_group_id(1) * TILE_WIDTH + get_local_id(1);
    int col = get_group_id(0) * TILE_WIDTH + get_local_id(0);
    float acc = 0.0f;
    for (int t = 0; t < N / TILE_WIDTH; ++t) {
        As[get_local_id(1)][get_local_id(0)] = A[row * N + t * TILE_WIDTH + get_local_id(0)];
        Bs[get_local_id(1)][get_local_id(0)] = B[(t * TILE_WIDTH + get_local_id(1)) * N + col];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TILE_WIDTH; ++k) acc += As[get_local_id(1)][k] * Bs[k][get_local_id(0)];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    C[row * N + col] = acc;
}
