// A batch of matrices, each `rows` rows of `cols`, transposed and scaled, a work-item per element as
// first written: the reads run along the input's rows, the writes a column apart (`rows` floats).
__kernel void transpose_scale(__global const float *in, __global float *out, int rows, int cols, float scale) {
    int c = get_global_id(0);
    int r = get_global_id(1);
    int b = get_group_id(2);
    if (c < cols && r < rows) {
        out[b * rows * cols + c * rows + r] = scale * in[b * rows * cols + r * cols + c];
    }
}
