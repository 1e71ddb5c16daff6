// C = alpha * A @ B + beta * C in float32, row-major, one work-item per output: a one-dimensional
// work-group of BLOCKSIZE * BLOCKSIZE, consecutive work-items on consecutive columns.
#define BLOCKSIZE 32

__kernel void sgemm_coalesced(int M, int N, int K, float alpha, __global const float *A, __global const float *B,
                              float beta, __global float *C) {
    const int cRow = get_group_id(0) * BLOCKSIZE + (get_local_id(0) / BLOCKSIZE);
    const int cCol = get_group_id(1) * BLOCKSIZE + (get_local_id(0) % BLOCKSIZE);
    if (cRow < M && cCol < N) {
        float tmp = 0.0f;
        for (int i = 0; i < K; ++i) {
            tmp += A[cRow * K + i] * B[i * N + cCol];
        }
        C[cRow * N + cCol] = alpha * tmp + beta * C[cRow * N + cCol];
    }
}
