// out = 2 x + y, a work-item per element: the rules rewrite its launch (items per work-item,
// vector packs), so that only the template's own source under the template's launch is the
// program that was measured.
__kernel void axpy(__global float* out, __global const float* x, __global const float* y, int n) {
    int i = get_global_id(0);
    if (i < n) {
        out[i] = 2.0f * x[i] + y[i];
    }
}
