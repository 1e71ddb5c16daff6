// softmax template for OpenCL: one work-group per row, the reductions through local memory. KEEP
// as in kernel.cu: 0 three passes over global memory, 1 the online maximum and sum then a second
// pass, 2 the row staged in local memory (the launch's dynamic local argument), 3 the row in
// private arrays of ITEMS vectors a work-item. -inf logits get probability 0. SPLIT (clusters) is
// CUDA's alone.
#ifndef BLOCK
#define BLOCK 1024
#endif
#ifndef VEC
#define VEC 4
#endif
#ifndef KEEP
#define KEEP 0
#endif
#ifndef ITEMS
#define ITEMS 1
#endif
#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef FAST
#define FAST 0
#endif
#ifndef SPLIT
#define SPLIT 1
#endif
#if SPLIT != 1
#error "OpenCL has no thread-block clusters: a row is one work-group's (the spec's max_cluster_blocks is 1 here)"
#endif

#define PRAGMA_(x) _Pragma(#x)
#define PRAGMA(x) PRAGMA_(x)
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if FAST
#define EXP(x) native_exp(x)
#else
#define EXP(x) exp(x)
#endif
#if VEC == 1
typedef float vfloat;
#define VLOAD(i, p) (p)[i]
#define VSTORE(v, i, p) ((p)[i] = (v))
#else
typedef CAT(float, VEC) vfloat;
#define VLOAD(i, p) CAT(vload, VEC)(i, p)
#define VSTORE(v, i, p) CAT(vstore, VEC)(v, i, p)
#endif

static float vmax(vfloat v)
{
#if VEC == 1
    return v;
#elif VEC == 2
    return fmax(v.s0, v.s1);
#else
    return fmax(fmax(v.s0, v.s1), fmax(v.s2, v.s3));
#endif
}

static float vsum(vfloat v)
{
#if VEC == 1
    return v;
#elif VEC == 2
    return v.s0 + v.s1;
#else
    return v.s0 + v.s1 + v.s2 + v.s3;
#endif
}

// exp(x - m) needs a finite m: a maximum of -inf becomes 0, and exp(-inf - 0) is 0
static float finite(float m) { return m == -INFINITY ? 0.f : m; }

static float group_max(float v, __local float *red)
{
    const int lid = get_local_id(0);
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (lid < stride) red[lid] = fmax(red[lid], red[lid + stride]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    v = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);  // `red` is reused by the next reduction
    return v;
}

static float group_sum(float v, __local float *red)
{
    const int lid = get_local_id(0);
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (lid < stride) red[lid] += red[lid + stride];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    v = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return v;
}

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void softmax(__global const float *logits, __global float *probs, int tokens, int vocab, __local float *staged)
{
    // `staged` is the launch's dynamic local memory: vocab floats when KEEP == 2
    __local float red[BLOCK], red_s[BLOCK];
    const long row = get_group_id(0);
    const int lid = get_local_id(0);
    const int nvec = vocab / VEC;
    __global const float *x = logits + row * vocab;
    __global float *y = probs + row * vocab;
    float m = -INFINITY, s = 0.f;

#if KEEP == 0
PRAGMA(unroll UNROLL)
    for (int i = lid; i < nvec; i += BLOCK) m = fmax(m, vmax(VLOAD(i, x)));
    m = finite(group_max(m, red));
PRAGMA(unroll UNROLL)
    for (int i = lid; i < nvec; i += BLOCK) s += vsum(EXP(VLOAD(i, x) - m));
    const float inv = 1.f / group_sum(s, red);
PRAGMA(unroll UNROLL)
    for (int i = lid; i < nvec; i += BLOCK) VSTORE(EXP(VLOAD(i, x) - m) * inv, i, y);

#elif KEEP == 1
PRAGMA(unroll UNROLL)
    for (int i = lid; i < nvec; i += BLOCK) {
        const vfloat v = VLOAD(i, x);
        const float top = fmax(m, vmax(v));
        s *= EXP(m - finite(top));
        m = top;
        s += vsum(EXP(v - finite(m)));
    }
    // the group's (max, sum) pairs, merged pairwise in local memory
    red[lid] = m;
    red_s[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (lid < stride) {
            const float m1 = red[lid], m2 = red[lid + stride], top = fmax(m1, m2), f = finite(top);
            red_s[lid] = red_s[lid] * EXP(m1 - f) + red_s[lid + stride] * EXP(m2 - f);
            red[lid] = top;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    m = finite(red[0]);
    const float inv = 1.f / red_s[0];
PRAGMA(unroll UNROLL)
    for (int i = lid; i < nvec; i += BLOCK) VSTORE(EXP(VLOAD(i, x) - m) * inv, i, y);

#elif KEEP == 2
PRAGMA(unroll UNROLL)
    for (int i = lid; i < nvec; i += BLOCK) {
        const vfloat v = VLOAD(i, x);
        VSTORE(v, i, staged);
        m = fmax(m, vmax(v));
    }
    m = finite(group_max(m, red));
PRAGMA(unroll UNROLL)
    for (int i = lid; i < nvec; i += BLOCK) {  // a work-item reads back only what it stored
        const vfloat e = EXP(VLOAD(i, staged) - m);
        VSTORE(e, i, staged);
        s += vsum(e);
    }
    const float inv = 1.f / group_sum(s, red);
PRAGMA(unroll UNROLL)
    for (int i = lid; i < nvec; i += BLOCK) VSTORE(VLOAD(i, staged) * inv, i, y);

#else
    vfloat c[ITEMS];
    for (int j = 0; j < ITEMS; ++j) {
        const int i = lid + j * BLOCK;
        c[j] = i < nvec ? VLOAD(i, x) : (vfloat)(-INFINITY);
        m = fmax(m, vmax(c[j]));
    }
    m = finite(group_max(m, red));
    for (int j = 0; j < ITEMS; ++j) {
        c[j] = EXP(c[j] - m);
        s += vsum(c[j]);
    }
    const float inv = 1.f / group_sum(s, red);
    for (int j = 0; j < ITEMS; ++j) {
        const int i = lid + j * BLOCK;
        if (i < nvec) VSTORE(c[j] * inv, i, y);
    }
#endif
}
