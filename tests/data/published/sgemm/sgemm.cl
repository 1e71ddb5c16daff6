// The worklog's matrix products ported to OpenCL, C = alpha * (A @ B) + beta * C, row-major. OpenCL
// C has no templates: the block's side is a #define, which the host may set with -D BLOCKSIZE=...
#ifndef BLOCKSIZE
#define BLOCKSIZE 32
#endif

// one work-item per entry of C, rows along dimension 0 (not coalesced)
__kernel void sgemm_naive(int M, int N, int K, float alpha, __global const float *A,
                          __global const float *B, float beta, __global float *C) {
  const uint x = get_global_id(0);
  const uint y = get_global_id(1);

  if (x < M && y < N) {
    float tmp = 0.0f;
    for (int i = 0; i < K; ++i) {
      tmp += A[x * K + i] * B[i * N + y];
    }
    C[x * N + y] = alpha * tmp + beta * C[x * N + y];
  }
}

// a one-dimensional work-group of BLOCKSIZE * BLOCKSIZE, consecutive work-items on consecutive
// columns of C
__kernel void sgemm_global_mem_coalesce(int M, int N, int K, float alpha, __global const float *A,
                                        __global const float *B, float beta, __global float *C) {
  const uint cRow = get_group_id(0) * BLOCKSIZE + (get_local_id(0) / BLOCKSIZE);
  const uint cCol = get_group_id(1) * BLOCKSIZE + (get_local_id(0) % BLOCKSIZE);

  if (cRow < M && cCol < N) {
    float tmp = 0.0f;
    for (int i = 0; i < K; ++i) {
      tmp += A[cRow * K + i] * B[i * N + cCol];
    }
    C[cRow * N + cCol] = alpha * tmp + beta * C[cRow * N + cCol];
  }
}

// BLOCKSIZE x BLOCKSIZE chunks of A and B in local memory; M, N and K multiples of BLOCKSIZE
__kernel void sgemm_shared_mem_block(int M, int N, int K, float alpha, __global const float *A,
                                     __global const float *B, float beta, __global float *C) {
  const uint cRow = get_group_id(0);
  const uint cCol = get_group_id(1);
  __local float As[BLOCKSIZE * BLOCKSIZE];
  __local float Bs[BLOCKSIZE * BLOCKSIZE];
  const uint threadCol = get_local_id(0) % BLOCKSIZE;
  const uint threadRow = get_local_id(0) / BLOCKSIZE;

  A += cRow * BLOCKSIZE * K;
  B += cCol * BLOCKSIZE;
  C += cRow * BLOCKSIZE * N + cCol * BLOCKSIZE;

  float tmp = 0.0f;
  for (int bkIdx = 0; bkIdx < K; bkIdx += BLOCKSIZE) {
    As[threadRow * BLOCKSIZE + threadCol] = A[threadRow * K + threadCol];
    Bs[threadRow * BLOCKSIZE + threadCol] = B[threadRow * N + threadCol];
    barrier(CLK_LOCAL_MEM_FENCE);
    A += BLOCKSIZE;
    B += BLOCKSIZE * N;
    for (int dotIdx = 0; dotIdx < BLOCKSIZE; ++dotIdx) {
      tmp += As[threadRow * BLOCKSIZE + dotIdx] * Bs[dotIdx * BLOCKSIZE + threadCol];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  C[threadRow * N + threadCol] = alpha * tmp + beta * C[threadRow * N + threadCol];
}
