// matmul template for OpenCL, the same tiling as kernel.cu: BM x BN tiles per work-group in
// BK-deep steps through local memory (A transposed, rows padded by 4), WM x WN tiles per group of
// 32 work-items walked in sub-tiles, TM x TN outputs per work-item in private memory. STAGES == 2
// double-buffers the tiles through private registers.
#ifndef BM
#define BM 32
#endif
#ifndef BN
#define BN 32
#endif
#ifndef BK
#define BK 32
#endif
#ifndef WM
#define WM 1
#endif
#ifndef WN
#define WN 32
#endif
#ifndef WNITER
#define WNITER 1
#endif
#ifndef TM
#define TM 1
#endif
#ifndef TN
#define TN 1
#endif
#ifndef STAGES
#define STAGES 1
#endif

#define THREADS ((BM / WM) * (BN / WN) * 32)
#define WMITER ((WM * WN) / (32 * TM * TN * WNITER))
#define WSUBM (WM / WMITER)
#define WSUBN (WN / WNITER)
#define LANES_N (WSUBN / TN)
#define AS_LD (BM + 4)
#define STAGE_FLOATS (BK * AS_LD + BK * BN)
#define A_VECS (BM * BK / 4)
#define B_VECS (BK * BN / 4)
#define A_PER ((A_VECS + THREADS - 1) / THREADS)
#define B_PER ((B_VECS + THREADS - 1) / THREADS)

#define FETCH(k0)                                                                                  \
    for (int j = 0; j < A_PER; ++j) {                                                              \
        const int i = tid + j * THREADS;                                                           \
        if (i < A_VECS) ra[j] = vload4(0, A + (long)(i / (BK / 4)) * K + (k0) + (i % (BK / 4)) * 4); \
    }                                                                                              \
    for (int j = 0; j < B_PER; ++j) {                                                              \
        const int i = tid + j * THREADS;                                                           \
        if (i < B_VECS) rb[j] = vload4(0, B + (long)((k0) + i / (BN / 4)) * N + (i % (BN / 4)) * 4); \
    }

#define STASH(As, Bs)                                                                              \
    for (int j = 0; j < A_PER; ++j) {                                                              \
        const int i = tid + j * THREADS;                                                           \
        if (i < A_VECS) {                                                                          \
            const int m = i / (BK / 4), k = (i % (BK / 4)) * 4;                                    \
            (As)[(k + 0) * AS_LD + m] = ra[j].x;                                                   \
            (As)[(k + 1) * AS_LD + m] = ra[j].y;                                                   \
            (As)[(k + 2) * AS_LD + m] = ra[j].z;                                                   \
            (As)[(k + 3) * AS_LD + m] = ra[j].w;                                                   \
        }                                                                                          \
    }                                                                                              \
    for (int j = 0; j < B_PER; ++j) {                                                              \
        const int i = tid + j * THREADS;                                                           \
        if (i < B_VECS) vstore4(rb[j], 0, (Bs) + (i / (BN / 4)) * BN + (i % (BN / 4)) * 4);       \
    }

#define COMPUTE(As, Bs)                                                                            \
    for (int k = 0; k < BK; ++k) {                                                                 \
        for (int wm = 0; wm < WMITER; ++wm)                                                        \
            for (int m = 0; m < TM; ++m) a[wm][m] = (As)[k * AS_LD + a0 + wm * WSUBM + m];         \
        for (int wn = 0; wn < WNITER; ++wn)                                                        \
            for (int n = 0; n < TN; ++n) b[wn][n] = (Bs)[k * BN + b0 + wn * WSUBN + n];            \
        for (int wm = 0; wm < WMITER; ++wm)                                                        \
            for (int wn = 0; wn < WNITER; ++wn)                                                    \
                for (int m = 0; m < TM; ++m)                                                       \
                    for (int n = 0; n < TN; ++n) acc[wm][wn][m][n] = fma(a[wm][m], b[wn][n], acc[wm][wn][m][n]); \
    }

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void matmul(__global const float *restrict A, __global const float *restrict B, __global float *restrict C,
            int M, int N, int K, __local float *smem)
{
    const int tid = get_local_id(0), warp = tid / 32, lane = tid % 32;
    const int warp_m = warp / (BN / WN), warp_n = warp % (BN / WN);
    const int lane_m = lane / LANES_N, lane_n = lane % LANES_N;
    const int a0 = warp_m * WM + lane_m * TM, b0 = warp_n * WN + lane_n * TN;
    const long row0 = (long)get_group_id(1) * BM, col0 = (long)get_group_id(0) * BN;
    A += row0 * K;
    B += col0;

    float acc[WMITER][WNITER][TM][TN];
    for (int wm = 0; wm < WMITER; ++wm)
        for (int wn = 0; wn < WNITER; ++wn)
            for (int m = 0; m < TM; ++m)
                for (int n = 0; n < TN; ++n) acc[wm][wn][m][n] = 0.f;
    float a[WMITER][TM], b[WNITER][TN];
    float4 ra[A_PER], rb[B_PER];

#if STAGES == 2
    FETCH(0)
    STASH(smem, smem + BK * AS_LD)
    barrier(CLK_LOCAL_MEM_FENCE);
    int stage = 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool more = k0 + BK < K;
        if (more) {
            FETCH(k0 + BK)
        }
        __local float *As = smem + stage * STAGE_FLOATS;
        COMPUTE(As, As + BK * AS_LD)
        if (more) {
            __local float *next = smem + (stage ^ 1) * STAGE_FLOATS;
            STASH(next, next + BK * AS_LD)
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        stage ^= 1;
    }
#else
    for (int k0 = 0; k0 < K; k0 += BK) {
        FETCH(k0)
        STASH(smem, smem + BK * AS_LD)
        barrier(CLK_LOCAL_MEM_FENCE);
        COMPUTE(smem, smem + BK * AS_LD)
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#endif

    for (int wm = 0; wm < WMITER; ++wm)
        for (int m = 0; m < TM; ++m) {
            __global float *row = C + (row0 + a0 + wm * WSUBM + m) * N + col0 + b0;
            for (int wn = 0; wn < WNITER; ++wn)
                for (int n = 0; n < TN; ++n) row[wn * WSUBN + n] = acc[wm][wn][m][n];
        }
}
