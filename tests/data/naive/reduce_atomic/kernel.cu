// The sum of all n elements into out[0]: each block reduces its 256 elements in shared memory
// (sequential addressing) and its first thread adds the block's sum with an atomic.
#define THREADS 256

__global__ void reduce_atomic(const float *x, float *out, int n) {
    __shared__ float cache[THREADS];
    int tid = threadIdx.x;
    int gid = blockIdx.x * blockDim.x + threadIdx.x;
    float v = 0.0f;
    if (gid < n) v = x[gid];
    cache[tid] = v;
    __syncthreads();
    for (int stride = THREADS / 2; stride > 0; stride /= 2) {
        if (tid < stride) cache[tid] += cache[tid + stride];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(out, cache[0]);
}
