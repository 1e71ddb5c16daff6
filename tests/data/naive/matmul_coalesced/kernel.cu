// C = alpha * A @ B + beta * C in float32, row-major, one thread per output: a one-dimensional
// block of BLOCKSIZE * BLOCKSIZE threads, consecutive threads on consecutive columns, so a warp
// reads one row of B in a run and broadcasts one element of A.
#define BLOCKSIZE 32

__global__ void sgemm_coalesced(int M, int N, int K, float alpha, const float *A, const float *B, float beta,
                                float *C) {
    const int cRow = blockIdx.x * BLOCKSIZE + (threadIdx.x / BLOCKSIZE);
    const int cCol = blockIdx.y * BLOCKSIZE + (threadIdx.x % BLOCKSIZE);
    if (cRow < M && cCol < N) {
        float tmp = 0.0f;
        for (int i = 0; i < K; ++i) {
            tmp += A[cRow * K + i] * B[i * N + cCol];
        }
        C[cRow * N + cCol] = alpha * tmp + beta * C[cRow * N + cCol];
    }
}
