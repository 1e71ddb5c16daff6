// out = SCALE * x, a thread per element, with its type and constant from headers: one beside the
// source, one in a folder the spec's options name.
#include "common.h"

__global__ void scale(floatX* out, const floatX* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = SCALE * x[i];
    }
}
