// Residual add, a work-item per element: out = x + residual.
__kernel void residual_add(__global float *out, __global const float *x, __global const float *residual, int n) {
    int i = get_global_id(0);
    if (i < n) out[i] = x[i] + residual[i];
}
