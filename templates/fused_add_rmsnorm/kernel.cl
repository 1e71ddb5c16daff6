// fused_add_rmsnorm template for OpenCL: half storage through vload_half / vstore_half, float
// math, the sum of squares reduced in local memory. STAGE 1 keeps the summed row in local memory.
#ifndef BLOCK
#define BLOCK 512
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef STAGE
#define STAGE 0
#endif
#ifndef UNROLL
#define UNROLL 1
#endif

#define PRAGMA_(x) _Pragma(#x)
#define PRAGMA(x) PRAGMA_(x)
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if VEC == 1
typedef float vfloat;
#define VLOAD(i, p) vload_half(i, p)
#define VSTORE(v, i, p) vstore_half(v, i, p)
#define VLOADF(i, p) (p)[i]
#define VSTOREF(v, i, p) ((p)[i] = (v))
#define VSUM(v) (v)
#else
typedef CAT(float, VEC) vfloat;
#define VLOAD(i, p) CAT(vload_half, VEC)(i, p)
#define VSTORE(v, i, p) CAT(vstore_half, VEC)(v, i, p)
#define VLOADF(i, p) CAT(vload, VEC)(i, p)
#define VSTOREF(v, i, p) CAT(vstore, VEC)(v, i, p)
#endif

static float vsum(vfloat v)
{
#if VEC == 1
    return v;
#elif VEC == 2
    return v.s0 + v.s1;
#elif VEC == 4
    return v.s0 + v.s1 + v.s2 + v.s3;
#else
    return v.s0 + v.s1 + v.s2 + v.s3 + v.s4 + v.s5 + v.s6 + v.s7;
#endif
}

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void fused_add_rmsnorm(__global half *input, __global half *residual, __global const half *weight,
                       float eps, int tokens, int d, __local float *staged)
{
    // `staged` is the launch's dynamic local memory: d floats when STAGE == 1
    __local float partial[BLOCK];
    const long row = get_group_id(0);
    const int lid = get_local_id(0);
    const int nvec = d / VEC;
    const long base = row * nvec;  // in units of VEC halves
    float sum = 0.f;
PRAGMA(unroll UNROLL)
    for (int i = lid; i < nvec; i += BLOCK) {
        vfloat x = VLOAD(base + i, input) + VLOAD(base + i, residual);
        VSTORE(x, base + i, residual);
        x = VLOAD(base + i, residual);  // the rounded value, as it is stored
        sum += vsum(x * x);
#if STAGE == 1
        VSTOREF(x, i, staged);
#endif
    }
    partial[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (lid < stride) partial[lid] += partial[lid + stride];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float s = rsqrt(partial[0] / d + eps);
PRAGMA(unroll UNROLL)
    for (int i = lid; i < nvec; i += BLOCK) {
#if STAGE == 1
        const vfloat x = VLOADF(i, staged);
#else
        const vfloat x = VLOAD(base + i, residual);
#endif
        VSTORE(x * s * VLOAD(i, weight), base + i, input);
    }
}
