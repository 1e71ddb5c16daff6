// Parallel sum in OpenCL, as the vendor's OpenCL samples write it: the element type T comes from
// the build options (-D T=float), the local memory from the host (the last argument, sized
// at launch), and each work-group writes one partial sum.
#ifndef T
#define T float
#endif

// interleaved addressing with a modulo: divergent, slow
__kernel void reduce0(__global T *g_idata, __global T *g_odata, unsigned int n, __local T *sdata) {
    unsigned int tid = get_local_id(0);
    unsigned int i = get_global_id(0);

    sdata[tid] = (i < n) ? g_idata[i] : 0;

    barrier(CLK_LOCAL_MEM_FENCE);

    // the tree
    for (unsigned int s = 1; s < get_local_size(0); s *= 2) {
        if ((tid % (2 * s)) == 0) {
            sdata[tid] += sdata[tid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    // the first work-item writes the group's sum
    if (tid == 0) g_odata[get_group_id(0)] = sdata[0];
}

// interleaved addressing with a strided index: contiguous threads work
__kernel void reduce1(__global T *g_idata, __global T *g_odata, unsigned int n, __local T *sdata) {
    unsigned int tid = get_local_id(0);
    unsigned int i = get_global_id(0);

    sdata[tid] = (i < n) ? g_idata[i] : 0;

    barrier(CLK_LOCAL_MEM_FENCE);

    for (unsigned int s = 1; s < get_local_size(0); s *= 2) {
        int index = 2 * s * tid;

        if (index < get_local_size(0)) {
            sdata[index] += sdata[index + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    if (tid == 0) g_odata[get_group_id(0)] = sdata[0];
}

// sequential addressing
__kernel void reduce2(__global T *g_idata, __global T *g_odata, unsigned int n, __local T *sdata) {
    unsigned int tid = get_local_id(0);
    unsigned int i = get_global_id(0);

    sdata[tid] = (i < n) ? g_idata[i] : 0;

    barrier(CLK_LOCAL_MEM_FENCE);

    for (unsigned int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    if (tid == 0) g_odata[get_group_id(0)] = sdata[0];
}

// the first add during the load: two elements a work-item, half the work-groups; each work-item
// keeps its running sum in a register beside its slot
__kernel void reduce3(__global T *g_idata, __global T *g_odata, unsigned int n, __local T *sdata) {
    unsigned int tid = get_local_id(0);
    unsigned int i = get_group_id(0) * (get_local_size(0) * 2) + get_local_id(0);

    T mySum = (i < n) ? g_idata[i] : 0;
    if (i + get_local_size(0) < n)
        mySum += g_idata[i + get_local_size(0)];

    sdata[tid] = mySum;
    barrier(CLK_LOCAL_MEM_FENCE);

    for (unsigned int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sdata[tid] = mySum = mySum + sdata[tid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    if (tid == 0) g_odata[get_group_id(0)] = mySum;
}

// the work-group size compiled in (-D blockSize=256), so the tree unrolls and the levels a group of
// this size does not need disappear; no OpenCL device promises a warp in lockstep, so every level
// keeps its barrier down to the last
#ifndef blockSize
#define blockSize 256
#endif

__kernel void reduce5(__global T *g_idata, __global T *g_odata, unsigned int n, __local T *sdata) {
    unsigned int tid = get_local_id(0);
    unsigned int i = get_group_id(0) * (blockSize * 2) + get_local_id(0);

    T mySum = (i < n) ? g_idata[i] : 0;
    if (i + blockSize < n)
        mySum += g_idata[i + blockSize];

    sdata[tid] = mySum;
    barrier(CLK_LOCAL_MEM_FENCE);

    if (blockSize >= 512) { if (tid < 256) { sdata[tid] = mySum = mySum + sdata[tid + 256]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >= 256) { if (tid < 128) { sdata[tid] = mySum = mySum + sdata[tid + 128]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >= 128) { if (tid <  64) { sdata[tid] = mySum = mySum + sdata[tid +  64]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >=  64) { if (tid <  32) { sdata[tid] = mySum = mySum + sdata[tid +  32]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >=  32) { if (tid <  16) { sdata[tid] = mySum = mySum + sdata[tid +  16]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >=  16) { if (tid <   8) { sdata[tid] = mySum = mySum + sdata[tid +   8]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >=   8) { if (tid <   4) { sdata[tid] = mySum = mySum + sdata[tid +   4]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >=   4) { if (tid <   2) { sdata[tid] = mySum = mySum + sdata[tid +   2]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >=   2) { if (tid <   1) { sdata[tid] = mySum = mySum + sdata[tid +   1]; } barrier(CLK_LOCAL_MEM_FENCE); }

    if (tid == 0) g_odata[get_group_id(0)] = mySum;
}

// reduce6: each work-item first adds as many pairs of elements as the range leaves it, in its own
// slot of local memory (a loop striding by the whole range: a fixed number of work-groups whatever
// n), then reduce5's tree with a barrier at every level; nIsPow2 (a build option) skips the second
// element's check where n is a power of two
#ifndef nIsPow2
#define nIsPow2 0
#endif

__kernel void reduce6(__global T *g_idata, __global T *g_odata, unsigned int n, __local T *sdata) {
    unsigned int tid = get_local_id(0);
    unsigned int i = get_group_id(0) * (get_local_size(0) * 2) + get_local_id(0);
    unsigned int gridSize = blockSize * 2 * get_num_groups(0);
    sdata[tid] = 0;

    while (i < n) {
        sdata[tid] += g_idata[i];
        if (nIsPow2 || i + blockSize < n)
            sdata[tid] += g_idata[i + blockSize];
        i += gridSize;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    if (blockSize >= 512) { if (tid < 256) { sdata[tid] += sdata[tid + 256]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >= 256) { if (tid < 128) { sdata[tid] += sdata[tid + 128]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >= 128) { if (tid <  64) { sdata[tid] += sdata[tid +  64]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >=  64) { if (tid <  32) { sdata[tid] += sdata[tid +  32]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >=  32) { if (tid <  16) { sdata[tid] += sdata[tid +  16]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >=  16) { if (tid <   8) { sdata[tid] += sdata[tid +   8]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >=   8) { if (tid <   4) { sdata[tid] += sdata[tid +   4]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >=   4) { if (tid <   2) { sdata[tid] += sdata[tid +   2]; } barrier(CLK_LOCAL_MEM_FENCE); }
    if (blockSize >=   2) { if (tid <   1) { sdata[tid] += sdata[tid +   1]; } barrier(CLK_LOCAL_MEM_FENCE); }

    if (tid == 0) g_odata[get_group_id(0)] = sdata[0];
}
