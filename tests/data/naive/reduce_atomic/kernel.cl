// The sum of all n elements into out[0]: each work-group reduces its 256 elements in local memory
// (sequential addressing) and its first work-item adds the sum with a compare-and-swap loop (OpenCL
// 1.2 has no float atomic add).
#define THREADS 256

void atomic_add_float(volatile __global float *addr, float value) {
    union { unsigned int u; float f; } old, next;
    do {
        old.f = *addr;
        next.f = old.f + value;
    } while (atomic_cmpxchg((volatile __global unsigned int *)addr, old.u, next.u) != old.u);
}

__kernel void reduce_atomic(__global const float *x, __global float *out, int n) {
    __local float cache[THREADS];
    int tid = get_local_id(0);
    int gid = get_global_id(0);
    float v = 0.0f;
    if (gid < n) v = x[gid];
    cache[tid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = THREADS / 2; stride > 0; stride /= 2) {
        if (tid < stride) cache[tid] += cache[tid + stride];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (tid == 0) atomic_add_float(out, cache[0]);
}
