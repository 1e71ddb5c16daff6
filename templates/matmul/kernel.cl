// matmul template for OpenCL: BM x BN tiles per work-group through local memory, TM x TN
// outputs per work-item in private memory.
#ifndef BM
#define BM 32
#endif
#ifndef BN
#define BN 32
#endif
#ifndef BK
#define BK 32
#endif
#ifndef TM
#define TM 1
#endif
#ifndef TN
#define TN 1
#endif
#define THREADS ((BM / TM) * (BN / TN))

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1)))
void matmul(__global const float *restrict A, __global const float *restrict B, __global float *restrict C,
            int M, int N, int K)
{
    __local float As[BK][BM];
    __local float Bs[BK][BN];
    const int tid = get_local_id(0);
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);
    const long row0 = (long)get_group_id(1) * BM, col0 = (long)get_group_id(0) * BN;
    float acc[TM][TN];
    for (int m = 0; m < TM; ++m)
        for (int n = 0; n < TN; ++n) acc[m][n] = 0.f;
    float a[TM], b[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = tid; i < BM * BK; i += THREADS) {
            const int m = i / BK, k = i % BK;
            As[k][m] = A[(row0 + m) * K + k0 + k];
        }
        for (int i = tid; i < BK * BN; i += THREADS) {
            const int k = i / BN, n = i % BN;
            Bs[k][n] = B[(long)(k0 + k) * N + col0 + n];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < BK; ++k) {
            for (int m = 0; m < TM; ++m) a[m] = As[k][ty * TM + m];
            for (int n = 0; n < TN; ++n) b[n] = Bs[k][tx * TN + n];
            for (int m = 0; m < TM; ++m)
                for (int n = 0; n < TN; ++n) acc[m][n] += a[m] * b[n];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int m = 0; m < TM; ++m)
        for (int n = 0; n < TN; ++n) C[(row0 + ty * TM + m) * N + col0 + tx * TN + n] = acc[m][n];
}
