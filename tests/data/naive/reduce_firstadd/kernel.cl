// Sum of each block's 512 elements into out[block]: the first add during the load (each of the 256
// threads adds two elements a block apart), then the sequential-addressing tree.
__kernel void reduce_firstadd(__global const float *g_idata, __global float *g_odata, unsigned int n) {
    __local float sdata[256];
    unsigned int tid = get_local_id(0);
    unsigned int i = get_group_id(0) * (256 * 2) + get_local_id(0);
    float mySum = (i < n) ? g_idata[i] : 0.0f;
    if (i + 256 < n) mySum += g_idata[i + 256];
    sdata[tid] = mySum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (unsigned int s = 256 / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tid == 0) g_odata[get_group_id(0)] = sdata[0];
}
