// The bar for the naive row convolution (tests/data/naive/conv_rows), written by hand as the CUDA
// samples' convolutionSeparable does it: a block stages BY rows of BX * RX points and the filter's
// radius either side in shared memory (zero outside the image), then each thread computes RX
// outputs BX apart from it. The same taps in the same order as the naive kernel.
#ifndef BX
#define BX 32
#endif
#ifndef BY
#define BY 8
#endif
#ifndef RX
#define RX 4
#endif
#define KERNEL_RADIUS 4

extern "C" __global__ void __launch_bounds__(BX * BY) conv_rows(float *__restrict__ out, const float *__restrict__ in,
                                                                 const float *__restrict__ taps, int H, int W)
{
    __shared__ float tile[BY][BX * RX + 2 * KERNEL_RADIUS];
    const int y = blockIdx.y * BY + threadIdx.y;
    const int x0 = blockIdx.x * (BX * RX) - KERNEL_RADIUS;
    for (int i = threadIdx.x; i < BX * RX + 2 * KERNEL_RADIUS; i += BX) {
        const int x = x0 + i;
        tile[threadIdx.y][i] = (y < H && x >= 0 && x < W) ? in[(long)y * W + x] : 0.0f;
    }
    __syncthreads();
    if (y >= H) return;
#pragma unroll
    for (int r = 0; r < RX; ++r) {
        const int x = blockIdx.x * (BX * RX) + r * BX + threadIdx.x;
        if (x >= W) break;
        float sum = 0.0f;
#pragma unroll
        for (int k = -KERNEL_RADIUS; k <= KERNEL_RADIUS; k++)
            sum += tile[threadIdx.y][r * BX + threadIdx.x + KERNEL_RADIUS + k] * __ldg(&taps[KERNEL_RADIUS - k]);
        out[(long)y * W + x] = sum;
    }
}
