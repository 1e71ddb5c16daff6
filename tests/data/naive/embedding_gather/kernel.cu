// Token embedding lookup: out[t, :] = table[ids[t], :], one thread per token looping over the
// channels (neighbouring threads read rows dim floats apart).
__global__ void embedding_gather(float *out, const int *ids, const float *table, int tokens, int dim) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < tokens) {
        int id = ids[t];
        for (int c = 0; c < dim; c++) {
            out[t * dim + c] = table[id * dim + c];
        }
    }
}
