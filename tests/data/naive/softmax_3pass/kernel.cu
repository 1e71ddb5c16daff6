// Row softmax, one thread per row, three passes over the input: maximum, sum of exponentials,
// probabilities (float32).
__global__ void softmax_3pass(float* out, const float* inp, int N, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < N) {
        const float* x = inp + row * C;
        float* y = out + row * C;
        float maxval = -INFINITY;
        for (int i = 0; i < C; i++) {
            if (x[i] > maxval) {
                maxval = x[i];
            }
        }
        float sum = 0.0f;
        for (int i = 0; i < C; i++) {
            sum += expf(x[i] - maxval);
        }
        for (int i = 0; i < C; i++) {
            y[i] = expf(x[i] - maxval) / sum;
        }
    }
}
