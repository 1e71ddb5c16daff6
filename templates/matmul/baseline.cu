// The textbook shared-memory matmul: 32 x 32 tiles, one output per thread, 32 x 32 threads.
extern "C" __global__ void matmul(const float *__restrict__ A, const float *__restrict__ B,
                                  float *__restrict__ C, int M, int N, int K)
{
    __shared__ float As[32][32];
    __shared__ float Bs[32][32];
    const int row = blockIdx.y * 32 + threadIdx.y, col = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += 32) {
        As[threadIdx.y][threadIdx.x] = A[(long)row * K + k0 + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(long)(k0 + threadIdx.y) * N + col];
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 32; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[(long)row * N + col] = acc;
}
