// merge_attn_states template: each thread merges PACKS packs of VEC halves of one head.
// Defaults reproduce baseline.cu.
#include <cuda_fp16.h>
#include <math_constants.h>

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
#define EXP __expf
#define LOG __logf
#else
#define EXP expf
#define LOG logf
#endif

struct __align__(2 * VEC) halfvec { __half v[VEC]; };

extern "C" __global__ void __launch_bounds__(BLOCK)
merge_attn_states(__half *__restrict__ out, float *__restrict__ s_out,
                  const __half *__restrict__ v_a, const float *__restrict__ s_a,
                  const __half *__restrict__ v_b, const float *__restrict__ s_b,
                  int tokens, int heads, int head_dim)
{
    const long item = (long)blockIdx.x * BLOCK + threadIdx.x;  // one item = PACKS packs
    const int per_head = head_dim / (VEC * PACKS);
    const long th = item / per_head;
    if (th >= (long)tokens * heads) return;
    const int first = (int)(item % per_head) * PACKS;
    float la = s_a[th], lb = s_b[th];
    la = isinf(la) ? -CUDART_INF_F : la;
    lb = isinf(lb) ? -CUDART_INF_F : lb;
    const float m = fmaxf(la, lb);
    const halfvec *pa = reinterpret_cast<const halfvec *>(v_a + th * head_dim);
    const halfvec *pb = reinterpret_cast<const halfvec *>(v_b + th * head_dim);
    halfvec *po = reinterpret_cast<halfvec *>(out + th * head_dim);
    if (isinf(m)) {
#pragma unroll
        for (int p = 0; p < PACKS; ++p) po[first + p] = pa[first + p];
        if (first == 0) s_out[th] = m;
        return;
    }
    const float wa = EXP(la - m), wb = EXP(lb - m), total = wa + wb;
    const float fa = wa / total, fb = wb / total;
    halfvec a[PACKS], b[PACKS];
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {  // all loads first: PACKS x 2 in flight
        a[p] = pa[first + p];
        b[p] = pb[first + p];
    }
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {
        halfvec r;
#pragma unroll
        for (int k = 0; k < VEC; ++k)
            r.v[k] = __float2half(__half2float(a[p].v[k]) * fa + __half2float(b[p].v[k]) * fb);
        po[first + p] = r;
    }
    if (first == 0) s_out[th] = LOG(total) + m;
}
