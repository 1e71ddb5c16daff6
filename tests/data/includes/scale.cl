// out = SCALE * x, a work-item per element, with its type and constant from headers: one beside
// the source, one in a folder the spec's options name.
#include "common.h"

__kernel void scale(__global floatX* out, __global const floatX* x, int n) {
    int i = get_global_id(0);
    if (i < n) {
        out[i] = SCALE * x[i];
    }
}
