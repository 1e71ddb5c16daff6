// Batched C[b] = A[b] @ B[b] in float32, one thread per output, the batch along the grid's z.
__global__ void bmm(const float *A, const float *B, float *C, int M, int N, int K) {
    const int b = blockIdx.z;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k)
            acc += A[(long)b * M * K + row * K + k] * B[(long)b * K * N + k * N + col];
        C[(long)b * M * N + row * N + col] = acc;
    }
}
