// Residual add on half storage, a work-item per element: out = x + residual, through vload_half /
// vstore_half (no fp16 extension needed).
__kernel void residual_add(__global half *out, __global const half *x, __global const half *residual, int n) {
    int i = get_global_id(0);
    if (i < n) vstore_half(vload_half(i, x) + vload_half(i, residual), i, out);
}
