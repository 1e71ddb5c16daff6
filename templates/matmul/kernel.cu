// matmul template: C = A @ B in float32 on the CUDA cores.
//
// Each block computes a BM x BN tile of C in BK-deep steps through shared memory. The block's
// warps split the tile into WM x WN warp tiles; a warp walks its tile in WMITER x WNITER
// sub-tiles, and in each sub-tile every lane holds a TM x TN micro-tile of C in registers. Lanes
// that share rows read the same values of A (a broadcast), so a warp's shared-memory reads grow
// with WM + WN, not with WM x WN.
//
// Global loads are 16-byte vectors along K (for A) and N (for B); A is stored transposed in
// shared memory (padded by 4 floats a row against bank conflicts on the store), so that a lane's
// TM values of A are consecutive and, with TM and TN multiples of 4, read as float4.
// STAGES == 2 double-buffers the tiles: the next step's global loads are in flight in registers
// while this step computes, and one barrier per step is enough.
//
// The defaults reproduce baseline.cu: 32 x 32 tiles, BK = 32, one output per thread, a warp per
// row of the tile (1024 threads).
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
#define AS_LD (BM + 4)                       // row length of the transposed A tile
#define STAGE_FLOATS (BK * AS_LD + BK * BN)  // one stage: A tile, then B tile
#define A_VECS (BM * BK / 4)
#define B_VECS (BK * BN / 4)
#define A_PER ((A_VECS + THREADS - 1) / THREADS)
#define B_PER ((B_VECS + THREADS - 1) / THREADS)

// Global -> registers: this thread's share of the A and B tiles at depth k0.
__device__ __forceinline__ void fetch(const float *__restrict__ A, const float *__restrict__ B, int N, int K,
                                      int k0, int tid, float4 *ra, float4 *rb)
{
#pragma unroll
    for (int j = 0; j < A_PER; ++j) {
        const int i = tid + j * THREADS;
        if (A_VECS % THREADS == 0 || i < A_VECS) {
            const int m = i / (BK / 4), kq = i % (BK / 4);
            ra[j] = *reinterpret_cast<const float4 *>(A + (long)m * K + k0 + kq * 4);
        }
    }
#pragma unroll
    for (int j = 0; j < B_PER; ++j) {
        const int i = tid + j * THREADS;
        if (B_VECS % THREADS == 0 || i < B_VECS) {
            const int k = i / (BN / 4), nq = i % (BN / 4);
            rb[j] = *reinterpret_cast<const float4 *>(B + (long)(k0 + k) * N + nq * 4);
        }
    }
}

// Registers -> shared memory stage `As` (A transposed) and `Bs`.
__device__ __forceinline__ void stash(float *As, float *Bs, int tid, const float4 *ra, const float4 *rb)
{
#pragma unroll
    for (int j = 0; j < A_PER; ++j) {
        const int i = tid + j * THREADS;
        if (A_VECS % THREADS == 0 || i < A_VECS) {
            const int m = i / (BK / 4), k = (i % (BK / 4)) * 4;
            As[(k + 0) * AS_LD + m] = ra[j].x;
            As[(k + 1) * AS_LD + m] = ra[j].y;
            As[(k + 2) * AS_LD + m] = ra[j].z;
            As[(k + 3) * AS_LD + m] = ra[j].w;
        }
    }
#pragma unroll
    for (int j = 0; j < B_PER; ++j) {
        const int i = tid + j * THREADS;
        if (B_VECS % THREADS == 0 || i < B_VECS) {
            const int k = i / (BN / 4), n = (i % (BN / 4)) * 4;
            *reinterpret_cast<float4 *>(Bs + k * BN + n) = rb[j];
        }
    }
}

// `count` consecutive floats of shared memory into registers, as float4 where they align.
template <int count>
__device__ __forceinline__ void read_row(const float *src, float *dst)
{
    if (count % 4 == 0) {
#pragma unroll
        for (int v = 0; v < count / 4; ++v) {
            const float4 q = *reinterpret_cast<const float4 *>(src + 4 * v);
            dst[4 * v] = q.x, dst[4 * v + 1] = q.y, dst[4 * v + 2] = q.z, dst[4 * v + 3] = q.w;
        }
    } else {
#pragma unroll
        for (int v = 0; v < count; ++v) dst[v] = src[v];
    }
}

// One BK-deep step of the warp's sub-tiles from shared memory.
__device__ __forceinline__ void compute(const float *As, const float *Bs, int a0, int b0,
                                        float (&acc)[WMITER][WNITER][TM][TN])
{
    float a[WMITER][TM], b[WNITER][TN];
#pragma unroll
    for (int k = 0; k < BK; ++k) {
#pragma unroll
        for (int wm = 0; wm < WMITER; ++wm) read_row<TM>(As + k * AS_LD + a0 + wm * WSUBM, a[wm]);
#pragma unroll
        for (int wn = 0; wn < WNITER; ++wn) read_row<TN>(Bs + k * BN + b0 + wn * WSUBN, b[wn]);
#pragma unroll
        for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int m = 0; m < TM; ++m)
#pragma unroll
                    for (int n = 0; n < TN; ++n) acc[wm][wn][m][n] = fmaf(a[wm][m], b[wn][n], acc[wm][wn][m][n]);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
matmul(const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C, int M, int N, int K)
{
    extern __shared__ float4 smem4[];
    float *smem = reinterpret_cast<float *>(smem4);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int warp_m = warp / (BN / WN), warp_n = warp % (BN / WN);
    const int lane_m = lane / LANES_N, lane_n = lane % LANES_N;
    const int a0 = warp_m * WM + lane_m * TM, b0 = warp_n * WN + lane_n * TN;
    const long row0 = (long)blockIdx.y * BM, col0 = (long)blockIdx.x * BN;
    A += row0 * K;
    B += col0;

    float acc[WMITER][WNITER][TM][TN];
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
            for (int m = 0; m < TM; ++m)
#pragma unroll
                for (int n = 0; n < TN; ++n) acc[wm][wn][m][n] = 0.f;

    float4 ra[A_PER], rb[B_PER];
#if STAGES == 2
    fetch(A, B, N, K, 0, tid, ra, rb);
    stash(smem, smem + BK * AS_LD, tid, ra, rb);
    __syncthreads();
    int stage = 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool more = k0 + BK < K;
        if (more) fetch(A, B, N, K, k0 + BK, tid, ra, rb);
        float *As = smem + stage * STAGE_FLOATS;
        compute(As, As + BK * AS_LD, a0, b0, acc);
        if (more) {
            float *next = smem + (stage ^ 1) * STAGE_FLOATS;
            stash(next, next + BK * AS_LD, tid, ra, rb);
        }
        __syncthreads();
        stage ^= 1;
    }
#else
    for (int k0 = 0; k0 < K; k0 += BK) {
        fetch(A, B, N, K, k0, tid, ra, rb);
        stash(smem, smem + BK * AS_LD, tid, ra, rb);
        __syncthreads();
        compute(smem, smem + BK * AS_LD, a0, b0, acc);
        __syncthreads();
    }
#endif

#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int m = 0; m < TM; ++m) {
            float *row = C + (row0 + a0 + wm * WSUBM + m) * N + col0 + b0;
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn) {
                if (TN % 4 == 0) {
#pragma unroll
                    for (int v = 0; v < TN / 4; ++v)
                        *reinterpret_cast<float4 *>(row + wn * WSUBN + 4 * v) =
                            make_float4(acc[wm][wn][m][4 * v], acc[wm][wn][m][4 * v + 1],
                                        acc[wm][wn][m][4 * v + 2], acc[wm][wn][m][4 * v + 3]);
                } else {
#pragma unroll
                    for (int n = 0; n < TN; ++n) row[wn * WSUBN + n] = acc[wm][wn][m][n];
                }
            }
        }
}
