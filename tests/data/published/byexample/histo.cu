// A byte histogram as a book's chapter on atomics writes it, in two steps: first each thread of a
// grid of twice as many blocks as multiprocessors strides over the buffer adding to the global
// bins, then each block counts into its own 256 bins in shared memory (a bin a thread: blocks of
// 256 threads) and adds them to the global bins at the end.
#include <cuda_runtime.h>

__global__ void histo_kernel(unsigned char *buffer, long size, unsigned int *histo) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    int offset = blockDim.x * gridDim.x;
    while (i < size) {
        atomicAdd(&(histo[buffer[i]]), 1);
        i += offset;
    }
}

__global__ void histo_shared_kernel(unsigned char *buffer, long size, unsigned int *histo) {
    __shared__ unsigned int temp[256];
    temp[threadIdx.x] = 0;
    __syncthreads();

    int i = threadIdx.x + blockIdx.x * blockDim.x;
    int offset = blockDim.x * gridDim.x;
    while (i < size) {
        atomicAdd(&temp[buffer[i]], 1);
        i += offset;
    }
    __syncthreads();

    atomicAdd(&(histo[threadIdx.x]), temp[threadIdx.x]);
}

void histogram(unsigned char *buffer, long size, unsigned int *histo, int multiprocessors) {
    histo_shared_kernel<<<multiprocessors * 2, 256>>>(buffer, size, histo);
}
