// Sum of each block's 256 elements into out[block]: interleaved addressing without divergence (the
// s-th step's threads are the first ones, each at index 2 * s * tid), shared memory of fixed size.
#define BLOCK_SIZE 256

__global__ void reduce_nodivergence(const float *in, float *out, int n) {
    __shared__ float sdata[BLOCK_SIZE];
    int tid = threadIdx.x;
    int i = blockIdx.x * BLOCK_SIZE + tid;
    sdata[tid] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (int s = 1; s < BLOCK_SIZE; s *= 2) {
        int index = 2 * s * tid;
        if (index < BLOCK_SIZE) {
            sdata[index] += sdata[index + s];
        }
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}
