// C = A @ B^T on half storage with float accumulation, B given as N x K (each output a dot product
// of a row of A and a row of B), one thread per output, columns along x.
#include <cuda_fp16.h>

__global__ void matmul_half(const __half *A, const __half *Bt, __half *C, int M, int N, int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        acc += __half2float(A[row * K + k]) * __half2float(Bt[col * K + k]);
    }
    C[row * N + col] = __float2half(acc);
}
