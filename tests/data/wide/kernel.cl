// out = 1.5 * x + 0.5 * y, written with nine tuning parameters.
#ifndef BLOCK
#define BLOCK 64
#endif
#ifndef ITEMS_PER_THREAD
#define ITEMS_PER_THREAD 1
#endif
#ifndef VECTOR_WIDTH
#define VECTOR_WIDTH 1
#endif
#ifndef UNROLL
#define UNROLL 0
#endif
#ifndef USE_MAD
#define USE_MAD 0
#endif
#ifndef CONTIGUOUS_ITEMS_PER_THREAD
#define CONTIGUOUS_ITEMS_PER_THREAD 0
#endif
#ifndef BOUNDS_CHECK
#define BOUNDS_CHECK 1
#endif
#ifndef SCALE_FIRST
#define SCALE_FIRST 1
#endif
#ifndef ACCUMULATE_IN_REGISTERS
#define ACCUMULATE_IN_REGISTERS 1
#endif

#define ALPHA 1.5f
#define BETA 0.5f

#if VECTOR_WIDTH == 1
typedef float vec_t;
#define LOAD(p, i) ((p)[i])
#define STORE(v, p, i) ((p)[i] = (v))
#elif VECTOR_WIDTH == 2
typedef float2 vec_t;
#define LOAD(p, i) vload2((i), (p))
#define STORE(v, p, i) vstore2((v), (i), (p))
#elif VECTOR_WIDTH == 4
typedef float4 vec_t;
#define LOAD(p, i) vload4((i), (p))
#define STORE(v, p, i) vstore4((v), (i), (p))
#endif
// VECTOR_WIDTH 3 defines no vec_t: such configurations fail to compile, on purpose.

#if USE_MAD
#define AXPBY(a, x, b, y) mad((vec_t)(a), (x), (b) * (y))
#elif SCALE_FIRST
#define AXPBY(a, x, b, y) ((a) * (x) + (b) * (y))
#else
#define AXPBY(a, x, b, y) ((b) * (y) + (a) * (x))
#endif

static inline float elem(__global const float *p, long i) { return p[i]; }

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void wide(__global const float *restrict x, __global const float *restrict y,
          __global float *restrict out, int n)
{
    const long group = get_group_id(0);
    const long lid = get_local_id(0);
#if UNROLL > 0
    __attribute__((opencl_unroll_hint(UNROLL)))
#endif
    for (int k = 0; k < ITEMS_PER_THREAD; ++k) {
#if CONTIGUOUS_ITEMS_PER_THREAD
        const long v = (group * BLOCK + lid) * ITEMS_PER_THREAD + k;
#else
        const long v = group * (BLOCK * ITEMS_PER_THREAD) + (long)k * BLOCK + lid;
#endif
        const long first = v * VECTOR_WIDTH;
        if (first + VECTOR_WIDTH <= n) {
            vec_t a = LOAD(x, v);
            vec_t b = LOAD(y, v);
#if ACCUMULATE_IN_REGISTERS
            STORE(AXPBY(ALPHA, a, BETA, b), out, v);
#else
            STORE(ALPHA * a, out, v);
            vec_t partial = LOAD((__global const float *)out, v);
            STORE(partial + BETA * b, out, v);
#endif
        } else {
            // the tail: element by element
            for (long i = first; i < first + VECTOR_WIDTH; ++i) {
#if BOUNDS_CHECK
                if (i < n)
#endif
                    out[i] = ALPHA * elem(x, i) + BETA * elem(y, i);
            }
        }
    }
}
