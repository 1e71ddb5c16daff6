// Matrix products the way an OpenCL SGEMM tutorial writes them: C = A * B with every matrix
// column-major (element (row, col) of an R-row matrix at col * R + row), the tile size TS given to
// the compiler (-DTS=...), M, N and K multiples of TS, so no kernel checks its bounds.
#ifndef TS
#define TS 32
#endif

// one work-item per element of C
__kernel void myGEMM1(const int M, const int N, const int K,
                      const __global float* A,
                      const __global float* B,
                      __global float* C) {

    // which element of C
    const int globalRow = get_global_id(0); // row of C
    const int globalCol = get_global_id(1); // column of C

    // the dot product of a row of A and a column of B
    float acc = 0.0f;
    for (int k=0; k<K; k++) {
        acc += A[k*M + globalRow] * B[globalCol*K + k];
    }

    C[globalCol*M + globalRow] = acc;
}

// a TS x TS tile of A and one of B staged in local memory at each step along K
__kernel void myGEMM2(const int M, const int N, const int K,
                      const __global float* A,
                      const __global float* B,
                      __global float* C) {

    // which element of C
    const int row = get_local_id(0); // row in the tile
    const int col = get_local_id(1); // column in the tile
    const int globalRow = TS*get_group_id(0) + row; // row of C
    const int globalCol = TS*get_group_id(1) + col; // column of C

    __local float Asub[TS][TS];
    __local float Bsub[TS][TS];

    float acc = 0.0f;

    // K / TS steps
    const int numTiles = K/TS;
    for (int t=0; t<numTiles; t++) {

        // each work-item brings one element of each tile
        const int tiledRow = TS*t + row;
        const int tiledCol = TS*t + col;
        Asub[col][row] = A[tiledCol*M + globalRow];
        Bsub[col][row] = B[globalCol*K + tiledRow];

        barrier(CLK_LOCAL_MEM_FENCE);

        for (int k=0; k<TS; k++) {
            acc += Asub[k][row] * Bsub[col][k];
        }

        barrier(CLK_LOCAL_MEM_FENCE);
    }

    C[globalCol*M + globalRow] = acc;
}
