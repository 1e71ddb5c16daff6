// The sum of each row by a work-group: its items stride over the row, then meet in a local-memory
// tree. The local memory is dynamic: a `__local` pointer argument (not the last one) that the
// launch sizes, a float a work-item.
__kernel void row_sum(__global float* out, __local float* partial, __global const float* inp, int C) {
    int row = get_group_id(0);
    int tid = get_local_id(0);
    int threads = get_local_size(0);
    float sum = 0.0f;
    for (int i = tid; i < C; i += threads) {
        sum += inp[row * C + i];
    }
    partial[tid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = threads / 2; s > 0; s >>= 1) {
        if (tid < s) {
            partial[tid] += partial[tid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tid == 0) {
        out[row] = partial[0];
    }
}
