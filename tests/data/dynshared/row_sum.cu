// The sum of each row by a block: its threads stride over the row, then meet in a shared-memory
// tree. The shared memory is dynamic: the launch gives it a float a thread.
__global__ void row_sum(float* out, const float* inp, int C) {
    extern __shared__ float partial[];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    float sum = 0.0f;
    for (int i = tid; i < C; i += blockDim.x) {
        sum += inp[row * C + i];
    }
    partial[tid] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            partial[tid] += partial[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) {
        out[row] = partial[0];
    }
}
