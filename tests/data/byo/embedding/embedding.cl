__kernel void embedding_lookup(__global float* out, __global const int* restrict ids,
                               __global const float* restrict table, int tokens, int dim, int vocab) {
    long idx = get_global_id(0);
    if (idx >= (long)tokens * dim) return;
    int t = idx / dim, c = idx % dim;
    int id = ids[t];
    out[idx] = (id >= 0 && id < vocab) ? table[(long)id * dim + c] : 0.0f;
}
