// Sum of each work-group's 256 elements into out[group]: interleaved addressing without divergence,
// local memory of fixed size.
#define BLOCK_SIZE 256

__kernel void reduce_nodivergence(__global const float *in, __global float *out, int n) {
    __local float sdata[BLOCK_SIZE];
    int tid = get_local_id(0);
    int i = get_group_id(0) * BLOCK_SIZE + tid;
    sdata[tid] = i < n ? in[i] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 1; s < BLOCK_SIZE; s *= 2) {
        int index = 2 * s * tid;
        if (index < BLOCK_SIZE) {
            sdata[index] += sdata[index + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tid == 0) out[get_group_id(0)] = sdata[0];
}
