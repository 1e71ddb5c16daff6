// Batched C[b] = A[b] @ B[b] in float32, one work-item per output, the batch along the third index.
__kernel void bmm(__global const float *A, __global const float *B, __global float *C, int M, int N, int K) {
    const int b = get_group_id(2);
    const int row = get_global_id(1);
    const int col = get_global_id(0);
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k)
            acc += A[(long)b * M * K + row * K + k] * B[(long)b * K * N + k * N + col];
        C[(long)b * M * N + row * N + col] = acc;
    }
}
