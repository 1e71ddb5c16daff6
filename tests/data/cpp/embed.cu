// An embedding lookup whose token ids are read through a local pointer into the id array, and
// whose element type comes from a header beside it.
#include "types.h"

__global__ void embed(floatX* out, const int* ids, const floatX* wte, int B, int T, int C, int V) {
    int b = blockIdx.y;
    int t = blockIdx.x;
    const int* row_ids = ids + b * T;
    int id = row_ids[t];
    const floatX* w = wte + id * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        out[(b * T + t) * C + c] = w[c];
    }
}
