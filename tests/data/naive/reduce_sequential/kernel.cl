// Sum of each work-group's 256 elements into out[group]: sequential addressing, local memory sized
// at launch (the last argument).
__kernel void reduce_sequential(__global const float *g_idata, __global float *g_odata, int n,
                                __local float *sdata) {
    unsigned int tid = get_local_id(0);
    unsigned int i = get_global_id(0);
    sdata[tid] = 0.0f;
    if (i < n) sdata[tid] = g_idata[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (unsigned int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tid == 0) g_odata[get_group_id(0)] = sdata[0];
}
