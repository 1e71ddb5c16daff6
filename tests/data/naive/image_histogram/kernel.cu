// A grey image's histogram into 256 bins, the counts added to what the bins hold: a thread per
// pixel of a two-dimensional launch and an atomic add on its global bin, as first written.
__global__ void image_histogram(const unsigned char *img, unsigned int *hist, int width, int height) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        atomicAdd(&hist[img[y * width + x]], 1);
    }
}
