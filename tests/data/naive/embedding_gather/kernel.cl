// Token embedding lookup: out[t, :] = table[ids[t], :], one work-item per token looping over the
// channels.
__kernel void embedding_gather(__global float *out, __global const int *ids, __global const float *table, int tokens,
                               int dim) {
    int t = get_global_id(0);
    if (t < tokens) {
        int id = ids[t];
        for (int c = 0; c < dim; c++) {
            out[t * dim + c] = table[id * dim + c];
        }
    }
}
