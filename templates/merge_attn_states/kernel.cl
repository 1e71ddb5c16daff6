// merge_attn_states template for OpenCL: half storage through vload_halfN / vstore_halfN.
#ifndef BLOCK
#define BLOCK 128
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef PACKS
#define PACKS 1
#endif
#ifndef FAST_EXP
#define FAST_EXP 0
#endif

#if FAST_EXP
#define EXP native_exp
#define LOG native_log
#else
#define EXP exp
#define LOG log
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
typedef CAT(float, VEC) vfloat;
#define VLOAD(i, p) CAT(vload_half, VEC)(i, p)
#define VSTORE(v, i, p) CAT(vstore_half, VEC)(v, i, p)

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void merge_attn_states(__global half *out, __global float *s_out,
                       __global const half *v_a, __global const float *s_a,
                       __global const half *v_b, __global const float *s_b,
                       int tokens, int heads, int head_dim)
{
    const long item = (long)get_group_id(0) * BLOCK + get_local_id(0);
    const int per_head = head_dim / (VEC * PACKS);
    const long th = item / per_head;
    if (th >= (long)tokens * heads) return;
    const int first = (int)(item % per_head) * PACKS;
    const long base = th * (head_dim / VEC);  // in units of VEC halves
    float la = s_a[th], lb = s_b[th];
    la = isinf(la) ? -INFINITY : la;
    lb = isinf(lb) ? -INFINITY : lb;
    const float m = fmax(la, lb);
    if (isinf(m)) {
        for (int p = 0; p < PACKS; ++p) VSTORE(VLOAD(base + first + p, v_a), base + first + p, out);
        if (first == 0) s_out[th] = m;
        return;
    }
    const float wa = EXP(la - m), wb = EXP(lb - m), total = wa + wb;
    const float fa = wa / total, fb = wb / total;
    for (int p = 0; p < PACKS; ++p) {
        const long i = base + first + p;
        VSTORE(VLOAD(i, v_a) * fa + VLOAD(i, v_b) * fb, i, out);
    }
    if (first == 0) s_out[th] = LOG(total) + m;
}
