// C = A @ B in float32, row-major, one thread per output element, as it is first written: the
// thread's x index picks the row, so the 32 threads of a warp read 32 rows of A, K floats apart.
__global__ void matmul_naive(const float *A, const float *B, float *C, int M, int N, int K) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k) {
            sum += A[row * K + k] * B[k * N + col];
        }
        C[row * N + col] = sum;
    }
}
