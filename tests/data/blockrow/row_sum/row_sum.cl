// Each row's sum added into out[row]: a work-group per row, its items' partial sums added by the first.
__kernel void row_sum(__global const float* x, __global float* out, int rows, int cols) {
    __local float part[1024];
    int row = get_group_id(0);
    float s = 0.f;
    for (int c = get_local_id(0); c < cols; c += get_local_size(0)) s += x[(long)row * cols + c];
    part[get_local_id(0)] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        float t = 0.f;
        for (int k = 0; k < (int)get_local_size(0); k++) t += part[k];
        out[row] += t;
    }
}
