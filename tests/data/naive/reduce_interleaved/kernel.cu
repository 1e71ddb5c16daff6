// Sum of each block's 256 elements into out[block] (per-block partial sums), the first tree
// reduction people write: interleaved addressing, a thread works when its index is a multiple of
// 2s (divergent warps), shared memory sized at launch.
__global__ void reduce_interleaved(const float *in, float *out, int n) {
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[tid] = (i < n) ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned int s = 1; s < blockDim.x; s *= 2) {
        if (tid % (2 * s) == 0) {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}
