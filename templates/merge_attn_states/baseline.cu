// merge_attn_states as inference engines ship it: one thread per 16-byte pack of a head,
// 128 threads per block; each thread recomputes its head's merge weights.
#include <cuda_fp16.h>
#include <math_constants.h>

struct __align__(16) half8 { __half v[8]; };

extern "C" __global__ void merge_attn_states(__half *__restrict__ out, float *__restrict__ s_out,
                                             const __half *__restrict__ v_a, const float *__restrict__ s_a,
                                             const __half *__restrict__ v_b, const float *__restrict__ s_b,
                                             int tokens, int heads, int head_dim)
{
    const long pack = (long)blockIdx.x * blockDim.x + threadIdx.x;
    const int per_head = head_dim / 8;
    const long th = pack / per_head;
    if (th >= (long)tokens * heads) return;
    const int offset = (int)(pack % per_head);
    float la = s_a[th], lb = s_b[th];
    la = isinf(la) ? -CUDART_INF_F : la;
    lb = isinf(lb) ? -CUDART_INF_F : lb;
    const float m = fmaxf(la, lb);
    const half8 *pa = reinterpret_cast<const half8 *>(v_a + th * head_dim);
    half8 *po = reinterpret_cast<half8 *>(out + th * head_dim);
    if (isinf(m)) {
        po[offset] = pa[offset];
        if (offset == 0) s_out[th] = m;
        return;
    }
    const float wa = expf(la - m), wb = expf(lb - m), total = wa + wb;
    const float fa = wa / total, fb = wb / total;
    const half8 a = pa[offset];
    const half8 b = reinterpret_cast<const half8 *>(v_b + th * head_dim)[offset];
    half8 r;
#pragma unroll
    for (int k = 0; k < 8; ++k)
        r.v[k] = __float2half(__half2float(a.v[k]) * fa + __half2float(b.v[k]) * fb);
    po[offset] = r;
    if (offset == 0) s_out[th] = logf(total) + m;
}
