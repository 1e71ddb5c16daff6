// A batch of matrices, each `rows` rows of `cols`, transposed and scaled, a thread per element as
// first written: the reads run along the input's rows, the writes a column apart (`rows` floats).
__global__ void transpose_scale(const float *in, float *out, int rows, int cols, float scale) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    int b = blockIdx.z;
    if (c < cols && r < rows) {
        out[b * rows * cols + c * rows + r] = scale * in[b * rows * cols + r * cols + c];
    }
}
