// Row softmax, one work-item per row: the maximum, then the exponentials written out and summed,
// then the output rescaled in place (float32).
__kernel void softmax_2pass(__global float* out, __global const float* inp, int N, int C) {
    int idx = get_global_id(0);
    if (idx >= N) return;
    __global const float* inp_row = inp + idx * C;
    __global float* out_row = out + idx * C;
    float maxval = -INFINITY;
    for (int j = 0; j < C; j++) maxval = fmax(maxval, inp_row[j]);
    float sum = 0.0f;
    for (int j = 0; j < C; j++) {
        out_row[j] = exp(inp_row[j] - maxval);
        sum += out_row[j];
    }
    float norm = 1.0f / sum;
    for (int j = 0; j < C; j++) out_row[j] *= norm;
}
