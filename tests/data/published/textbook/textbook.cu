// Kernels of a GPU programming course, chapter by chapter, as its textbook writes them: a matrix
// product one thread per element and then in shared-memory tiles, a 2-D convolution with its mask
// in constant memory, a 1-D stencil through a shared tile with halo, and a text histogram with
// atomics, first on global bins, then on bins privatised in shared memory, then with each thread
// counting several letters (contiguous or interleaved); a sum reduction
// into one total by atomics, its threads coarsened; a Kogge-Stone scan of each section.
#include <cuda_runtime.h>

#define TILE_WIDTH 16
#define MASK_DIM 5
#define MASK_OFFSET (MASK_DIM / 2)
#define IN_TILE_DIM 32
#define OUT_TILE_DIM ((IN_TILE_DIM) - 2 * (MASK_OFFSET))
#define RADIUS 3
#define BLOCK_SIZE 256
#define NUM_BINS 7
#define BLOCK_DIM 256
#define COARSE_FACTOR 4
#define CFACTOR 8
#define SECTION_SIZE 512

// ---------------------------------------------------------------------------------------------
// matrix product P = M N of square Width x Width matrices

// one thread computes one element of P
__global__ void MatrixMulKernel(float *M, float *N, float *P, int Width) {
    int Row = blockIdx.y * blockDim.y + threadIdx.y;
    int Col = blockIdx.x * blockDim.x + threadIdx.x;
    if ((Row < Width) && (Col < Width)) {
        float Pvalue = 0;
        for (int k = 0; k < Width; ++k) {
            Pvalue += M[Row * Width + k] * N[k * Width + Col];
        }
        P[Row * Width + Col] = Pvalue;
    }
}

// the same product in phases: each block loads a TILE_WIDTH x TILE_WIDTH tile of M and of N into
// shared memory, then every thread uses the tiles; Width must be a multiple of TILE_WIDTH
__global__ void MatrixMulTiled(float *M, float *N, float *P, int Width) {
    __shared__ float Mds[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Nds[TILE_WIDTH][TILE_WIDTH];

    int bx = blockIdx.x;
    int by = blockIdx.y;
    int tx = threadIdx.x;
    int ty = threadIdx.y;

    // the row and column of the P element this thread computes
    int Row = by * TILE_WIDTH + ty;
    int Col = bx * TILE_WIDTH + tx;

    float Pvalue = 0;
    for (int ph = 0; ph < Width / TILE_WIDTH; ++ph) {
        // collaborative loading of the M and N tiles
        Mds[ty][tx] = M[Row * Width + ph * TILE_WIDTH + tx];
        Nds[ty][tx] = N[(ph * TILE_WIDTH + ty) * Width + Col];
        __syncthreads();

        for (int k = 0; k < TILE_WIDTH; ++k) {
            Pvalue += Mds[ty][k] * Nds[k][tx];
        }
        __syncthreads();
    }
    P[Row * Width + Col] = Pvalue;
}

// the tiled product for any Width: a tile's elements past the matrix load as zero
__global__ void MatrixMulTiledBounds(float *M, float *N, float *P, int Width) {
    __shared__ float Mds[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Nds[TILE_WIDTH][TILE_WIDTH];

    int bx = blockIdx.x;
    int by = blockIdx.y;
    int tx = threadIdx.x;
    int ty = threadIdx.y;

    int Row = by * TILE_WIDTH + ty;
    int Col = bx * TILE_WIDTH + tx;

    float Pvalue = 0;
    for (int ph = 0; ph < ceil(Width / (float)TILE_WIDTH); ++ph) {
        if ((Row < Width) && (ph * TILE_WIDTH + tx) < Width)
            Mds[ty][tx] = M[Row * Width + ph * TILE_WIDTH + tx];
        else
            Mds[ty][tx] = 0.0f;
        if ((ph * TILE_WIDTH + ty) < Width && Col < Width)
            Nds[ty][tx] = N[(ph * TILE_WIDTH + ty) * Width + Col];
        else
            Nds[ty][tx] = 0.0f;
        __syncthreads();

        for (int k = 0; k < TILE_WIDTH; ++k) {
            Pvalue += Mds[ty][k] * Nds[k][tx];
        }
        __syncthreads();
    }
    if ((Row < Width) && (Col < Width))
        P[Row * Width + Col] = Pvalue;
}

// ---------------------------------------------------------------------------------------------
// 2-D convolution of a height x width image with a MASK_DIM x MASK_DIM mask; pixels outside the
// image count as zero (ghost cells). The mask is small and read by every thread: constant memory.

__constant__ float mask[MASK_DIM * MASK_DIM];

__global__ void convolution_2D_const(const float *in, float *out, int width, int height) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;

    if (row < height && col < width) {
        int start_r = row - MASK_OFFSET;
        int start_c = col - MASK_OFFSET;
        float temp = 0.0f;
        for (int i = 0; i < MASK_DIM; i++) {
            for (int j = 0; j < MASK_DIM; j++) {
                if ((start_r + i) >= 0 && (start_r + i) < height) {
                    if ((start_c + j) >= 0 && (start_c + j) < width) {
                        temp += in[(start_r + i) * width + (start_c + j)] * mask[i * MASK_DIM + j];
                    }
                }
            }
        }
        out[row * width + col] = temp;
    }
}

// the convolution through a shared input tile: a block of IN_TILE_DIM x IN_TILE_DIM threads loads
// the tile (zero outside the image), and its inner OUT_TILE_DIM x OUT_TILE_DIM threads compute
__global__ void convolution_tiled_2D_const(const float *in, float *out, int width, int height) {
    int col = blockIdx.x * OUT_TILE_DIM + threadIdx.x - MASK_OFFSET;
    int row = blockIdx.y * OUT_TILE_DIM + threadIdx.y - MASK_OFFSET;

    __shared__ float in_s[IN_TILE_DIM][IN_TILE_DIM];
    if (row >= 0 && row < height && col >= 0 && col < width) {
        in_s[threadIdx.y][threadIdx.x] = in[row * width + col];
    } else {
        in_s[threadIdx.y][threadIdx.x] = 0.0f;
    }
    __syncthreads();

    int tileCol = threadIdx.x - MASK_OFFSET;
    int tileRow = threadIdx.y - MASK_OFFSET;
    if (col >= 0 && col < width && row >= 0 && row < height) {
        if (tileCol >= 0 && tileCol < OUT_TILE_DIM && tileRow >= 0 && tileRow < OUT_TILE_DIM) {
            float Pvalue = 0.0f;
            for (int fRow = 0; fRow < MASK_DIM; fRow++) {
                for (int fCol = 0; fCol < MASK_DIM; fCol++) {
                    Pvalue += mask[fRow * MASK_DIM + fCol] * in_s[tileRow + fRow][tileCol + fCol];
                }
            }
            out[row * width + col] = Pvalue;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1-D stencil: out[i] = sum of in[i - RADIUS .. i + RADIUS]. The input is padded by RADIUS on each
// side (n + 2 * RADIUS elements); each block stages its BLOCK_SIZE elements and the halo.

__global__ void stencil_1d(const float *in, float *out, int n) {
    __shared__ float temp[BLOCK_SIZE + 2 * RADIUS];
    int gindex = threadIdx.x + blockIdx.x * blockDim.x;
    int lindex = threadIdx.x + RADIUS;

    // read the input elements into shared memory: the block's own, and RADIUS on each side
    if (gindex < n + RADIUS) {
        temp[lindex] = in[gindex + RADIUS];
    }
    if (threadIdx.x < RADIUS) {
        temp[lindex - RADIUS] = in[gindex];
        if (gindex + BLOCK_SIZE < n + RADIUS) {
            temp[lindex + BLOCK_SIZE] = in[gindex + RADIUS + BLOCK_SIZE];
        }
    }
    __syncthreads();

    if (gindex < n) {
        float result = 0.0f;
        for (int offset = -RADIUS; offset <= RADIUS; offset++) {
            result += temp[lindex + offset];
        }
        out[gindex] = result;
    }
}

// the same stencil read straight from global memory
__global__ void stencil_1d_global(const float *in, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float result = 0.0f;
        for (int offset = -RADIUS; offset <= RADIUS; offset++) {
            result += in[i + RADIUS + offset];
        }
        out[i] = result;
    }
}

// ---------------------------------------------------------------------------------------------
// histogram of a text by letter: bin b counts the letters 'a' + 4b .. 'a' + 4b + 3

__global__ void histo_kernel(const char *data, unsigned int length, unsigned int *histo) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < length) {
        int alphabet_position = data[i] - 'a';
        if (alphabet_position >= 0 && alphabet_position < 26) {
            atomicAdd(&(histo[alphabet_position / 4]), 1);
        }
    }
}

// privatisation: each block counts into its own bins in shared memory, then adds them to the
// global bins, one atomic per bin and block
__global__ void histo_private_kernel(const char *data, unsigned int length, unsigned int *histo) {
    __shared__ unsigned int histo_s[NUM_BINS];
    for (unsigned int bin = threadIdx.x; bin < NUM_BINS; bin += blockDim.x) {
        histo_s[bin] = 0u;
    }
    __syncthreads();

    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < length) {
        int alphabet_position = data[i] - 'a';
        if (alphabet_position >= 0 && alphabet_position < 26) {
            atomicAdd(&(histo_s[alphabet_position / 4]), 1);
        }
    }
    __syncthreads();

    for (unsigned int bin = threadIdx.x; bin < NUM_BINS; bin += blockDim.x) {
        unsigned int binValue = histo_s[bin];
        if (binValue > 0) {
            atomicAdd(&(histo[bin]), binValue);
        }
    }
}

// thread coarsening, contiguous partitioning: each thread counts CFACTOR consecutive letters into
// its block's bins, so fewer blocks merge
__global__ void histo_private_contiguous_kernel(const char *data, unsigned int length, unsigned int *histo) {
    __shared__ unsigned int histo_s[NUM_BINS];
    for (unsigned int bin = threadIdx.x; bin < NUM_BINS; bin += blockDim.x) {
        histo_s[bin] = 0u;
    }
    __syncthreads();

    unsigned int tid = blockIdx.x * blockDim.x + threadIdx.x;
    for (unsigned int i = tid * CFACTOR; i < min((tid + 1) * CFACTOR, length); ++i) {
        int alphabet_position = data[i] - 'a';
        if (alphabet_position >= 0 && alphabet_position < 26) {
            atomicAdd(&(histo_s[alphabet_position / 4]), 1);
        }
    }
    __syncthreads();

    for (unsigned int bin = threadIdx.x; bin < NUM_BINS; bin += blockDim.x) {
        unsigned int binValue = histo_s[bin];
        if (binValue > 0) {
            atomicAdd(&(histo[bin]), binValue);
        }
    }
}

// interleaved partitioning: the grid's threads take the letters a grid's width apart, so each step
// of a warp reads consecutive letters
__global__ void histo_private_interleaved_kernel(const char *data, unsigned int length, unsigned int *histo) {
    __shared__ unsigned int histo_s[NUM_BINS];
    for (unsigned int bin = threadIdx.x; bin < NUM_BINS; bin += blockDim.x) {
        histo_s[bin] = 0u;
    }
    __syncthreads();

    unsigned int tid = blockIdx.x * blockDim.x + threadIdx.x;
    for (unsigned int i = tid; i < length; i += blockDim.x * gridDim.x) {
        int alphabet_position = data[i] - 'a';
        if (alphabet_position >= 0 && alphabet_position < 26) {
            atomicAdd(&(histo_s[alphabet_position / 4]), 1);
        }
    }
    __syncthreads();

    for (unsigned int bin = threadIdx.x; bin < NUM_BINS; bin += blockDim.x) {
        unsigned int binValue = histo_s[bin];
        if (binValue > 0) {
            atomicAdd(&(histo[bin]), binValue);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// sum reduction into one total (the total starts at what `output` holds): each block sums its
// segment in shared memory, halving the active threads each step, and adds it with one atomic

__global__ void SegmentedSumReductionKernel(const float *input, float *output, int n) {
    __shared__ float input_s[BLOCK_DIM];
    unsigned int segment = 2 * blockDim.x * blockIdx.x;
    unsigned int i = segment + threadIdx.x;
    unsigned int t = threadIdx.x;
    float a = i < n ? input[i] : 0.0f;
    float b = i + BLOCK_DIM < n ? input[i + BLOCK_DIM] : 0.0f;
    input_s[t] = a + b;
    for (unsigned int stride = blockDim.x / 2; stride >= 1; stride /= 2) {
        __syncthreads();
        if (t < stride) {
            input_s[t] += input_s[t + stride];
        }
    }
    if (t == 0) {
        atomicAdd(output, input_s[0]);
    }
}

// thread coarsening: each thread first adds COARSE_FACTOR * 2 elements a block's width apart
__global__ void CoarsenedSumReductionKernel(const float *input, float *output, int n) {
    __shared__ float input_s[BLOCK_DIM];
    unsigned int segment = COARSE_FACTOR * 2 * blockDim.x * blockIdx.x;
    unsigned int i = segment + threadIdx.x;
    unsigned int t = threadIdx.x;
    float sum = i < n ? input[i] : 0.0f;
    for (unsigned int tile = 1; tile < COARSE_FACTOR * 2; ++tile) {
        if (i + tile * BLOCK_DIM < n) {
            sum += input[i + tile * BLOCK_DIM];
        }
    }
    input_s[t] = sum;
    for (unsigned int stride = blockDim.x / 2; stride >= 1; stride /= 2) {
        __syncthreads();
        if (t < stride) {
            input_s[t] += input_s[t + stride];
        }
    }
    if (t == 0) {
        atomicAdd(output, input_s[0]);
    }
}

// ---------------------------------------------------------------------------------------------
// inclusive scan of each SECTION_SIZE section (Kogge-Stone): a block of SECTION_SIZE threads, each
// step adding the element `stride` to the left, read before any thread writes

__global__ void Kogge_Stone_scan_kernel(const float *X, float *Y, unsigned int N) {
    __shared__ float XY[SECTION_SIZE];
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        XY[threadIdx.x] = X[i];
    } else {
        XY[threadIdx.x] = 0.0f;
    }
    for (unsigned int stride = 1; stride < blockDim.x; stride *= 2) {
        __syncthreads();
        float temp;
        if (threadIdx.x >= stride) {
            temp = XY[threadIdx.x] + XY[threadIdx.x - stride];
        }
        __syncthreads();
        if (threadIdx.x >= stride) {
            XY[threadIdx.x] = temp;
        }
    }
    if (i < N) {
        Y[i] = XY[threadIdx.x];
    }
}

// ---------------------------------------------------------------------------------------------
// host side

void matrix_mul(float *M, float *N, float *P, int Width) {
    dim3 dimGrid((Width + TILE_WIDTH - 1) / TILE_WIDTH, (Width + TILE_WIDTH - 1) / TILE_WIDTH);
    dim3 dimBlock(TILE_WIDTH, TILE_WIDTH);
    MatrixMulKernel<<<dimGrid, dimBlock>>>(M, N, P, Width);
}

void matrix_mul_tiled(float *M, float *N, float *P, int Width) {
    dim3 dimGrid(Width / TILE_WIDTH, Width / TILE_WIDTH);
    dim3 dimBlock(TILE_WIDTH, TILE_WIDTH);
    MatrixMulTiled<<<dimGrid, dimBlock>>>(M, N, P, Width);
}

void convolution(const float *h_mask, const float *in, float *out, int width, int height) {
    cudaMemcpyToSymbol(mask, h_mask, MASK_DIM * MASK_DIM * sizeof(float));
    dim3 dimBlock(16, 16);
    dim3 dimGrid((width + 15) / 16, (height + 15) / 16);
    convolution_2D_const<<<dimGrid, dimBlock>>>(in, out, width, height);
}

void stencil(const float *in, float *out, int n) {
    stencil_1d<<<(n + BLOCK_SIZE - 1) / BLOCK_SIZE, BLOCK_SIZE>>>(in, out, n);
}

void histogram(const char *data, unsigned int length, unsigned int *histo) {
    histo_private_kernel<<<(length + 255) / 256, 256>>>(data, length, histo);
}
