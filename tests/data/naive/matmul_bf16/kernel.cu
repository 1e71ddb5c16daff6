// C = A @ B on bfloat16 storage with float accumulation (B given as K x N), one thread per output,
// columns along x: the product of a transformer's linear layer as first written.
#include <cuda_bf16.h>

__global__ void matmul_bf16(const __nv_bfloat16 *A, const __nv_bfloat16 *B, __nv_bfloat16 *C, int M, int N,
                            int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k)
            acc += __bfloat162float(A[row * K + k]) * __bfloat162float(B[k * N + col]);
        C[row * N + col] = __float2bfloat16(acc);
    }
}
