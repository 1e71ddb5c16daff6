// Row softmax, one thread per row: the maximum, then the exponentials written out and summed,
// then the output rescaled in place (float32).
__global__ void softmax_2pass(float* out, const float* inp, int N, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N) return;
    const float* inp_row = inp + idx * C;
    float* out_row = out + idx * C;
    float maxval = -INFINITY;
    for (int j = 0; j < C; j++) maxval = fmaxf(maxval, inp_row[j]);
    double sum = 0.0;
    for (int j = 0; j < C; j++) {
        out_row[j] = expf(inp_row[j] - maxval);
        sum += out_row[j];
    }
    float norm = 1.0f / (float)sum;
    for (int j = 0; j < C; j++) out_row[j] *= norm;
}
