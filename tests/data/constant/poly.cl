// A polynomial of each element with its coefficients in constant memory: a `__constant` pointer
// argument.
#ifndef BLOCK
#define BLOCK 128
#endif

__kernel void poly(__global float* out, __constant float* coeffs, __global const float* x, int n) {
    int i = get_group_id(0) * BLOCK + get_local_id(0);
    if (i < n) {
        float v = x[i], acc = 0.0f;
        for (int k = 7; k >= 0; k--) {
            acc = acc * v + coeffs[k];
        }
        out[i] = acc;
    }
}
