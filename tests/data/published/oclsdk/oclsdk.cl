// Kernels in the style of the OpenCL vendors' SDK samples: four elements a work-item through
// vload4/vstore4 and float4 arithmetic, a dot product of float4 pairs, a sum reduced in __local
// memory from float4 loads, and the blocked matrix product with its AS/BS macros over __local tiles.

#define BLOCK_SIZE 16
#define GROUP_SIZE 256

// C = A + B, four elements a work-item; the last work-item adds the tail one element at a time
__kernel void vectorAdd4(__global const float *a, __global const float *b, __global float *c, int n) {
    int i = get_global_id(0);
    if (4 * i + 3 < n) {
        float4 va = vload4(i, a);
        float4 vb = vload4(i, b);
        vstore4(va + vb, i, c);
    } else {
        for (int j = 4 * i; j < n; j++) {
            c[j] = a[j] + b[j];
        }
    }
}

// the dot product of each pair of float4 rows: c[i] = a[i] . b[i]
__kernel void dotProduct(__global const float4 *a, __global const float4 *b, __global float *c, int n) {
    int i = get_global_id(0);
    if (i < n) {
        c[i] = dot(a[i], b[i]);
    }
}

// per-group partial sums: each work-item adds a float4 of the input (its four lanes), then the
// group halves its __local array until the first slot holds the group's sum
__kernel void reduceFloat4(__global const float4 *input, __global float *output, int n4) {
    __local float sdata[GROUP_SIZE];
    unsigned int tid = get_local_id(0);
    unsigned int i = get_global_id(0);

    float4 v = (i < n4) ? input[i] : (float4)(0.0f);
    sdata[tid] = v.x + v.y + v.z + v.w;
    barrier(CLK_LOCAL_MEM_FENCE);

    for (unsigned int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tid == 0) {
        output[get_group_id(0)] = sdata[0];
    }
}

// C = A B: hA x wA times wA x wB, row-major, every size a multiple of BLOCK_SIZE; each work-group
// computes a BLOCK_SIZE x BLOCK_SIZE block of C through sub-matrices of A and B in __local memory
#define AS(i, j) As[(j) + (i) * BLOCK_SIZE]
#define BS(i, j) Bs[(j) + (i) * BLOCK_SIZE]

__kernel void matrixMul(__global float *C, __global const float *A, __global const float *B, int wA, int wB) {
    __local float As[BLOCK_SIZE * BLOCK_SIZE];
    __local float Bs[BLOCK_SIZE * BLOCK_SIZE];

    int bx = get_group_id(0);
    int by = get_group_id(1);
    int tx = get_local_id(0);
    int ty = get_local_id(1);

    // the first, last and step of the sub-matrices of A and of B this group walks
    int aBegin = wA * BLOCK_SIZE * by;
    int aEnd = aBegin + wA - 1;
    int aStep = BLOCK_SIZE;
    int bBegin = BLOCK_SIZE * bx;
    int bStep = BLOCK_SIZE * wB;

    float Csub = 0.0f;
    for (int a = aBegin, b = bBegin; a <= aEnd; a += aStep, b += bStep) {
        AS(ty, tx) = A[a + wA * ty + tx];
        BS(ty, tx) = B[b + wB * ty + tx];
        barrier(CLK_LOCAL_MEM_FENCE);

        for (int k = 0; k < BLOCK_SIZE; ++k) {
            Csub += AS(ty, k) * BS(k, tx);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    C[get_global_id(1) * get_global_size(0) + get_global_id(0)] = Csub;
}
