// A histogram of bytes into 256 bins, the counts added to what the bins hold: a thread per byte
// and an atomic add on its global bin, as first written.
__global__ void histogram(const unsigned char *data, unsigned int *bins, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&bins[data[i]], 1u);
    }
}
