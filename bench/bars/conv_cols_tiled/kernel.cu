// The bar for the naive column convolution (tests/data/naive/conv_cols), written by hand as the
// CUDA samples' convolutionSeparable does it: a block stages BY * RY rows of BX points and the
// filter's radius above and below in shared memory (zero outside the image), then each thread
// computes RY outputs BY rows apart. The same taps in the same order as the naive kernel.
#ifndef BX
#define BX 32
#endif
#ifndef BY
#define BY 8
#endif
#ifndef RY
#define RY 4
#endif
#define KERNEL_RADIUS 4

extern "C" __global__ void __launch_bounds__(BX * BY) conv_cols(float *__restrict__ out, const float *__restrict__ in,
                                                                 const float *__restrict__ taps, int H, int W)
{
    __shared__ float tile[BY * RY + 2 * KERNEL_RADIUS][BX + 1];
    const int x = blockIdx.x * BX + threadIdx.x;
    const int y0 = blockIdx.y * (BY * RY) - KERNEL_RADIUS;
    for (int i = threadIdx.y; i < BY * RY + 2 * KERNEL_RADIUS; i += BY) {
        const int y = y0 + i;
        tile[i][threadIdx.x] = (x < W && y >= 0 && y < H) ? in[(long)y * W + x] : 0.0f;
    }
    __syncthreads();
    if (x >= W) return;
#pragma unroll
    for (int r = 0; r < RY; ++r) {
        const int y = blockIdx.y * (BY * RY) + r * BY + threadIdx.y;
        if (y >= H) break;
        float sum = 0.0f;
#pragma unroll
        for (int k = -KERNEL_RADIUS; k <= KERNEL_RADIUS; k++)
            sum += tile[r * BY + threadIdx.y + KERNEL_RADIUS + k][threadIdx.x] * __ldg(&taps[KERNEL_RADIUS - k]);
        out[(long)y * W + x] = sum;
    }
}
