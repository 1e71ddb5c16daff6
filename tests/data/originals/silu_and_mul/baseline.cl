// silu_and_mul ported from templates/silu_and_mul/baseline.cu to OpenCL, as a user's own kernel
// would be: one work-group per token row, each work-item taking VEC halves at a time, the
// work-group size fixed at 256. Half storage through vload_half / vstore_half (no fp16 extension
// needed), float math.
#define VEC 8

__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void silu_and_mul(__global half *out, __global const half *x, int tokens, int d)
{
    const long t = get_group_id(0);
    const __global half *gate = x + t * 2 * d;
    const __global half *up = gate + d;
    __global half *o = out + t * d;
    for (int i = get_local_id(0); i < d / VEC; i += get_local_size(0)) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const int j = i * VEC + k;
            const float a = vload_half(j, gate);
            vstore_half(a / (1.0f + exp(-a)) * vload_half(j, up), j, o);
        }
    }
}
