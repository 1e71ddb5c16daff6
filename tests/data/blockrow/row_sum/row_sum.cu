template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
    return v;
}

// adds each row's sum into out[row]: a warp's partial sums by atomics
__global__ void row_sum(const float* x, float* out, int rows, int cols) {
    int row = blockIdx.x;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += x[(long)row * cols + c];
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) atomicAdd(&out[row], s);
}
