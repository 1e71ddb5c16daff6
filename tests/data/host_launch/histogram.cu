// A shared-memory histogram whose launcher zeroes the bins and launches a fixed grid.
#include <cuda_runtime.h>
typedef unsigned int uint;
#define NUM_BINS 256
#define THREADS 256

__global__ void histogram_shared(const unsigned char* __restrict__ data, uint* __restrict__ bins, int n) {
    __shared__ uint local[NUM_BINS];
    for (int i = threadIdx.x; i < NUM_BINS; i += blockDim.x) local[i] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&local[data[i]], 1u);
    __syncthreads();
    for (int i = threadIdx.x; i < NUM_BINS; i += blockDim.x) atomicAdd(&bins[i], local[i]);
}

void launch(const unsigned char* d, uint* b, int n) {
    cudaMemset(b, 0, NUM_BINS * sizeof(uint));
    histogram_shared<<<120, THREADS>>>(d, b, n);
}
