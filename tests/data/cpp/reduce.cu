// A reduction template in a namespace, instantiated outside it with the qualified name: its
// entry is the instantiation, `reduce0<float>`.
namespace red {

template <typename T>
__global__ void reduce0(T* out, const T* x, int n) {
    extern __shared__ float partial[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    partial[tid] = (i < n) ? x[i] : T(0);
    __syncthreads();
    for (unsigned int s = 1; s < blockDim.x; s *= 2) {
        if (tid % (2 * s) == 0) {
            partial[tid] += partial[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) {
        out[blockIdx.x] = partial[0];
    }
}

}  // namespace red

template __global__ void red::reduce0<float>(float* out, const float* x, int n);

// its launcher, as the code base has it: a launch of each element type it serves instantiates a
// kernel of its own, so the name alone would name several
void reduce_sum(float* out, const float* x, int n, int blocks, int threads) {
    red::reduce0<float><<<blocks, threads, threads * sizeof(float)>>>(out, x, n);
}
