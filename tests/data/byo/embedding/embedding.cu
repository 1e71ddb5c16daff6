// Token embedding lookup: out[t, :] = table[ids[t], :], one thread per output element.
template <typename T>
__global__ void embedding_lookup(T* out, const int* __restrict__ ids, const T* __restrict__ table,
                                 int tokens, int dim, int vocab) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)tokens * dim) return;
    int t = idx / dim, c = idx % dim;
    int id = ids[t];
    out[idx] = (id >= 0 && id < vocab) ? table[(long)id * dim + c] : T(0);
}
template __global__ void embedding_lookup<float>(float*, const int*, const float*, int, int, int);
