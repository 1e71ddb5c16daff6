// C = A @ B in float32, row-major, one work-item per output element, as it is first written: the
// work-item's first index picks the row.
__kernel void matmul_naive(__global const float *A, __global const float *B, __global float *C, int M, int N,
                           int K) {
    const int row = get_global_id(0);
    const int col = get_global_id(1);
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k) {
            sum += A[row * K + k] * B[k * N + col];
        }
        C[row * N + col] = sum;
    }
}
