// Kernels in the style of the CUDA samples: the element-wise vector addition that opens them, and
// the shared-memory matrix product whose block size is a template argument, instantiated by the
// host for blocks of 16 and 32 (the sample's matrices are multiples of the block).
#include <cuda_runtime.h>

// C = A + B, a thread per element
__global__ void vectorAdd(const float *A, const float *B, float *C, int numElements) {
    int i = blockDim.x * blockIdx.x + threadIdx.x;

    if (i < numElements) {
        C[i] = A[i] + B[i];
    }
}

// C = A * B for wA and wB multiples of BLOCK_SIZE: each block walks the sub-matrices of A along its
// row and of B along its column, loading one of each into shared memory per step
template <int BLOCK_SIZE>
__global__ void MatrixMulCUDA(float *C, float *A, float *B, int wA, int wB) {
    int bx = blockIdx.x;
    int by = blockIdx.y;
    int tx = threadIdx.x;
    int ty = threadIdx.y;

    // the first, last and step of the sub-matrices of A this block walks, and of B
    int aBegin = wA * BLOCK_SIZE * by;
    int aEnd = aBegin + wA - 1;
    int aStep = BLOCK_SIZE;
    int bBegin = BLOCK_SIZE * bx;
    int bStep = BLOCK_SIZE * wB;

    float Csub = 0;

    for (int a = aBegin, b = bBegin; a <= aEnd; a += aStep, b += bStep) {
        __shared__ float As[BLOCK_SIZE][BLOCK_SIZE];
        __shared__ float Bs[BLOCK_SIZE][BLOCK_SIZE];

        As[ty][tx] = A[a + wA * ty + tx];
        Bs[ty][tx] = B[b + wB * ty + tx];
        __syncthreads();

#pragma unroll
        for (int k = 0; k < BLOCK_SIZE; ++k) {
            Csub += As[ty][k] * Bs[k][tx];
        }
        __syncthreads();
    }

    int c = wB * BLOCK_SIZE * by + BLOCK_SIZE * bx;
    C[c + wB * ty + tx] = Csub;
}

template __global__ void MatrixMulCUDA<16>(float *C, float *A, float *B, int wA, int wB);
template __global__ void MatrixMulCUDA<32>(float *C, float *A, float *B, int wA, int wB);

void matrix_multiply(float *d_C, float *d_A, float *d_B, int hA, int wA, int wB, int block_size) {
    dim3 threads(block_size, block_size);
    dim3 grid(wB / threads.x, hA / threads.y);
    if (block_size == 16) {
        MatrixMulCUDA<16><<<grid, threads>>>(d_C, d_A, d_B, wA, wB);
    } else {
        MatrixMulCUDA<32><<<grid, threads>>>(d_C, d_A, d_B, wA, wB);
    }
}
