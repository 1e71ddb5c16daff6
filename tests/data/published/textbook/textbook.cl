// The course's kernels in OpenCL, as its OpenCL chapter ports them: work-items and work-groups
// for threads and blocks, __local memory for shared, the mask as a __constant argument, and the
// 32-bit atomics of OpenCL 1.1 on global and local bins; a float total through compare-and-swap.

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

// one work-item computes one element of P = M N (square Width x Width)
__kernel void MatrixMulKernel(__global float *M, __global float *N, __global float *P, int Width) {
    int Row = get_group_id(1) * get_local_size(1) + get_local_id(1);
    int Col = get_group_id(0) * get_local_size(0) + get_local_id(0);
    if ((Row < Width) && (Col < Width)) {
        float Pvalue = 0;
        for (int k = 0; k < Width; ++k) {
            Pvalue += M[Row * Width + k] * N[k * Width + Col];
        }
        P[Row * Width + Col] = Pvalue;
    }
}

// the product in phases through TILE_WIDTH x TILE_WIDTH tiles in local memory; Width must be a
// multiple of TILE_WIDTH
__kernel void MatrixMulTiled(__global float *M, __global float *N, __global float *P, int Width) {
    __local float Mds[TILE_WIDTH][TILE_WIDTH];
    __local float Nds[TILE_WIDTH][TILE_WIDTH];

    int bx = get_group_id(0);
    int by = get_group_id(1);
    int tx = get_local_id(0);
    int ty = get_local_id(1);

    int Row = by * TILE_WIDTH + ty;
    int Col = bx * TILE_WIDTH + tx;

    float Pvalue = 0;
    for (int ph = 0; ph < Width / TILE_WIDTH; ++ph) {
        Mds[ty][tx] = M[Row * Width + ph * TILE_WIDTH + tx];
        Nds[ty][tx] = N[(ph * TILE_WIDTH + ty) * Width + Col];
        barrier(CLK_LOCAL_MEM_FENCE);

        for (int k = 0; k < TILE_WIDTH; ++k) {
            Pvalue += Mds[ty][k] * Nds[k][tx];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    P[Row * Width + Col] = Pvalue;
}

// the tiled product for any Width: a tile's elements past the matrix load as zero
__kernel void MatrixMulTiledBounds(__global float *M, __global float *N, __global float *P, int Width) {
    __local float Mds[TILE_WIDTH][TILE_WIDTH];
    __local float Nds[TILE_WIDTH][TILE_WIDTH];

    int bx = get_group_id(0);
    int by = get_group_id(1);
    int tx = get_local_id(0);
    int ty = get_local_id(1);

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
        barrier(CLK_LOCAL_MEM_FENCE);

        for (int k = 0; k < TILE_WIDTH; ++k) {
            Pvalue += Mds[ty][k] * Nds[k][tx];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if ((Row < Width) && (Col < Width))
        P[Row * Width + Col] = Pvalue;
}

// 2-D convolution with a MASK_DIM x MASK_DIM mask in constant memory; outside the image is zero
__kernel void convolution_2D_const(__global const float *in, __global float *out, __constant float *mask,
                                   int width, int height) {
    int col = get_global_id(0);
    int row = get_global_id(1);

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
__kernel void convolution_tiled_2D_const(__global const float *in, __global float *out,
                                         __constant float *mask, int width, int height) {
    int col = get_group_id(0) * OUT_TILE_DIM + get_local_id(0) - MASK_OFFSET;
    int row = get_group_id(1) * OUT_TILE_DIM + get_local_id(1) - MASK_OFFSET;

    __local float in_s[IN_TILE_DIM][IN_TILE_DIM];
    if (row >= 0 && row < height && col >= 0 && col < width) {
        in_s[get_local_id(1)][get_local_id(0)] = in[row * width + col];
    } else {
        in_s[get_local_id(1)][get_local_id(0)] = 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    int tileCol = get_local_id(0) - MASK_OFFSET;
    int tileRow = get_local_id(1) - MASK_OFFSET;
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

// 1-D stencil over an input padded by RADIUS on each side, the block's elements and halo staged
__kernel void stencil_1d(__global const float *in, __global float *out, int n) {
    __local float temp[BLOCK_SIZE + 2 * RADIUS];
    int gindex = get_global_id(0);
    int lindex = get_local_id(0) + RADIUS;

    if (gindex < n + RADIUS) {
        temp[lindex] = in[gindex + RADIUS];
    }
    if (get_local_id(0) < RADIUS) {
        temp[lindex - RADIUS] = in[gindex];
        if (gindex + BLOCK_SIZE < n + RADIUS) {
            temp[lindex + BLOCK_SIZE] = in[gindex + RADIUS + BLOCK_SIZE];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    if (gindex < n) {
        float result = 0.0f;
        for (int offset = -RADIUS; offset <= RADIUS; offset++) {
            result += temp[lindex + offset];
        }
        out[gindex] = result;
    }
}

// the same stencil read straight from global memory
__kernel void stencil_1d_global(__global const float *in, __global float *out, int n) {
    int i = get_global_id(0);
    if (i < n) {
        float result = 0.0f;
        for (int offset = -RADIUS; offset <= RADIUS; offset++) {
            result += in[i + RADIUS + offset];
        }
        out[i] = result;
    }
}

// text histogram by letter, atomics on the global bins
__kernel void histo_kernel(__global const char *data, unsigned int length, __global unsigned int *histo) {
    unsigned int i = get_global_id(0);
    if (i < length) {
        int alphabet_position = data[i] - 'a';
        if (alphabet_position >= 0 && alphabet_position < 26) {
            atomic_inc(&histo[alphabet_position / 4]);
        }
    }
}

// privatised: each work-group counts into local bins, then adds them to the global bins
__kernel void histo_private_kernel(__global const char *data, unsigned int length, __global unsigned int *histo) {
    __local unsigned int histo_s[NUM_BINS];
    for (unsigned int bin = get_local_id(0); bin < NUM_BINS; bin += get_local_size(0)) {
        histo_s[bin] = 0u;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    unsigned int i = get_global_id(0);
    if (i < length) {
        int alphabet_position = data[i] - 'a';
        if (alphabet_position >= 0 && alphabet_position < 26) {
            atomic_inc(&histo_s[alphabet_position / 4]);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    for (unsigned int bin = get_local_id(0); bin < NUM_BINS; bin += get_local_size(0)) {
        unsigned int binValue = histo_s[bin];
        if (binValue > 0) {
            atomic_add(&histo[bin], binValue);
        }
    }
}

// coarsened, contiguous: each work-item counts CFACTOR consecutive letters into its group's bins
__kernel void histo_private_contiguous_kernel(__global const char *data, unsigned int length, __global unsigned int *histo) {
    __local unsigned int histo_s[NUM_BINS];
    for (unsigned int bin = get_local_id(0); bin < NUM_BINS; bin += get_local_size(0)) {
        histo_s[bin] = 0u;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    unsigned int tid = get_global_id(0);
    for (unsigned int i = tid * CFACTOR; i < min((tid + 1) * CFACTOR, length); ++i) {
        int alphabet_position = data[i] - 'a';
        if (alphabet_position >= 0 && alphabet_position < 26) {
            atomic_inc(&histo_s[alphabet_position / 4]);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    for (unsigned int bin = get_local_id(0); bin < NUM_BINS; bin += get_local_size(0)) {
        unsigned int binValue = histo_s[bin];
        if (binValue > 0) {
            atomic_add(&histo[bin], binValue);
        }
    }
}

// coarsened, interleaved: the work-items take the letters a global size apart
__kernel void histo_private_interleaved_kernel(__global const char *data, unsigned int length, __global unsigned int *histo) {
    __local unsigned int histo_s[NUM_BINS];
    for (unsigned int bin = get_local_id(0); bin < NUM_BINS; bin += get_local_size(0)) {
        histo_s[bin] = 0u;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    for (unsigned int i = get_global_id(0); i < length; i += get_global_size(0)) {
        int alphabet_position = data[i] - 'a';
        if (alphabet_position >= 0 && alphabet_position < 26) {
            atomic_inc(&histo_s[alphabet_position / 4]);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    for (unsigned int bin = get_local_id(0); bin < NUM_BINS; bin += get_local_size(0)) {
        unsigned int binValue = histo_s[bin];
        if (binValue > 0) {
            atomic_add(&histo[bin], binValue);
        }
    }
}

// OpenCL 1.2 has no atomic add of floats: the usual compare-and-swap loop on the bits
void atomic_add_float(volatile __global float *addr, float value) {
    union { unsigned int u; float f; } old, next;
    do {
        old.f = *addr;
        next.f = old.f + value;
    } while (atomic_cmpxchg((volatile __global unsigned int *)addr, old.u, next.u) != old.u);
}

// sum reduction into one total (the total starts at what `output` holds), one atomic a group
__kernel void SegmentedSumReductionKernel(__global const float *input, __global float *output, int n) {
    __local float input_s[BLOCK_DIM];
    unsigned int segment = 2 * get_local_size(0) * get_group_id(0);
    unsigned int i = segment + get_local_id(0);
    unsigned int t = get_local_id(0);
    float a = i < n ? input[i] : 0.0f;
    float b = i + BLOCK_DIM < n ? input[i + BLOCK_DIM] : 0.0f;
    input_s[t] = a + b;
    for (unsigned int stride = get_local_size(0) / 2; stride >= 1; stride /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t < stride) {
            input_s[t] += input_s[t + stride];
        }
    }
    if (t == 0) {
        atomic_add_float(output, input_s[0]);
    }
}

// thread coarsening: each thread first adds COARSE_FACTOR * 2 elements a block's width apart
__kernel void CoarsenedSumReductionKernel(__global const float *input, __global float *output, int n) {
    __local float input_s[BLOCK_DIM];
    unsigned int segment = COARSE_FACTOR * 2 * get_local_size(0) * get_group_id(0);
    unsigned int i = segment + get_local_id(0);
    unsigned int t = get_local_id(0);
    float sum = i < n ? input[i] : 0.0f;
    for (unsigned int tile = 1; tile < COARSE_FACTOR * 2; ++tile) {
        if (i + tile * BLOCK_DIM < n) {
            sum += input[i + tile * BLOCK_DIM];
        }
    }
    input_s[t] = sum;
    for (unsigned int stride = get_local_size(0) / 2; stride >= 1; stride /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t < stride) {
            input_s[t] += input_s[t + stride];
        }
    }
    if (t == 0) {
        atomic_add_float(output, input_s[0]);
    }
}

// inclusive scan of each SECTION_SIZE section (Kogge-Stone): a block of SECTION_SIZE threads, each
// step adding the element `stride` to the left, read before any thread writes

__kernel void Kogge_Stone_scan_kernel(__global const float *X, __global float *Y, unsigned int N) {
    __local float XY[SECTION_SIZE];
    unsigned int i = get_group_id(0) * get_local_size(0) + get_local_id(0);
    if (i < N) {
        XY[get_local_id(0)] = X[i];
    } else {
        XY[get_local_id(0)] = 0.0f;
    }
    for (unsigned int stride = 1; stride < get_local_size(0); stride *= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        float temp;
        if (get_local_id(0) >= stride) {
            temp = XY[get_local_id(0)] + XY[get_local_id(0) - stride];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (get_local_id(0) >= stride) {
            XY[get_local_id(0)] = temp;
        }
    }
    if (i < N) {
        Y[i] = XY[get_local_id(0)];
    }
}

