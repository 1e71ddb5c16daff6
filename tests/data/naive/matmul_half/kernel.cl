// C = A @ B^T on half storage with float accumulation, B given as N x K, one work-item per output,
// columns along the first index; halves through vload_half / vstore_half (no fp16 extension).
__kernel void matmul_half(__global const half *A, __global const half *Bt, __global half *C, int M, int N, int K) {
    int col = get_global_id(0);
    int row = get_global_id(1);
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        acc += vload_half(row * K + k, A) * vload_half(col * K + k, Bt);
    }
    vstore_half(acc, row * N + col, C);
}
