// Sum of each work-group's 256 elements into out[group] (per-group partial sums): interleaved
// addressing, local memory sized at launch (the last argument). The block size is read once before
// the loop: PoCL miscompiles a barrier in a loop bounded by get_local_size(0) itself.
__kernel void reduce_interleaved(__global const float *in, __global float *out, int n, __local float *sdata) {
    unsigned int tid = get_local_id(0);
    unsigned int i = get_global_id(0);
    unsigned int size = get_local_size(0);
    sdata[tid] = (i < n) ? in[i] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (unsigned int s = 1; s < size; s *= 2) {
        if (tid % (2 * s) == 0) {
            sdata[tid] += sdata[tid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tid == 0) out[get_group_id(0)] = sdata[0];
}
