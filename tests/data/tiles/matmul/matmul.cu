// A square-tiled matrix product as textbooks write it: the block is TILE_WIDTH x TILE_WIDTH.
#define TILE_WIDTH 16
__global__ void matmul_tiled(const float *A, const float *B, float *C, int N) {
    __shared__ float As[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Bs[TILE_WIDTH][TILE_WIDTH];
    int row = blockIdx.y * TILE_WIDTH + threadIdx.y;
    int col = blockIdx.x * TILE_WIDTH + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < N / TILE_WIDTH; ++t) {
        As[threadIdx.y][threadIdx.x] = A[row * N + t * TILE_WIDTH + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(t * TILE_WIDTH + threadIdx.y) * N + col];
        __syncthreads();
        for (int k = 0; k < TILE_WIDTH; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[row * N + col] = acc;
}
void run(const float *A, const float *B, float *C, int N) {
    dim3 block(TILE_WIDTH, TILE_WIDTH);
    dim3 grid(N / TILE_WIDTH, N / TILE_WIDTH);
    matmul_tiled<<<grid, block>>>(A, B, C, N);
}
