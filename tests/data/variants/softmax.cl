// Softmax over each row in two variants, as code bases publish them: a work-item per row first,
// then a work-group per row that meets in local memory. kerntune tunes the kernel a spec names;
// the other kernel of the file never decides its template.

__kernel void softmax_rows(__global float* out, __global const float* inp, int N, int C) {
    int row = get_global_id(0);
    if (row < N) {
        __global const float* x = inp + row * C;
        float maxval = -INFINITY;
        for (int j = 0; j < C; j++) {
            maxval = fmax(maxval, x[j]);
        }
        float sum = 0.0f;
        for (int j = 0; j < C; j++) {
            sum += exp(x[j] - maxval);
        }
        __global float* y = out + row * C;
        for (int j = 0; j < C; j++) {
            y[j] = exp(x[j] - maxval) / sum;
        }
    }
}
// ---- the other variants ----

// a work-group per row: the group's items stride over the row and meet in local memory
__kernel void softmax_groups(__global float* out, __global const float* inp, int N, int C,
                             __local float* scratch) {
    int row = get_group_id(0);
    int tid = get_local_id(0);
    int threads = get_local_size(0);
    __global const float* x = inp + row * C;
    float maxval = -INFINITY;
    #pragma unroll 4
    for (int j = tid; j < C; j += threads) {
        maxval = fmax(maxval, x[j]);
    }
    scratch[tid] = maxval;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = threads / 2; s > 0; s /= 2) {
        if (tid < s) {
            scratch[tid] = fmax(scratch[tid], scratch[tid + s]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    maxval = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    float sum = 0.0f;
    #pragma unroll 4
    for (int j = tid; j < C; j += threads) {
        sum += exp(x[j] - maxval);
    }
    scratch[tid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = threads / 2; s > 0; s /= 2) {
        if (tid < s) {
            scratch[tid] += scratch[tid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    sum = scratch[0];
    for (int j = tid; j < C; j += threads) {
        out[row * C + j] = exp(x[j] - maxval) / sum;
    }
}
