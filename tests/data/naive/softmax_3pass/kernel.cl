// Row softmax, one work-item per row, three passes over the input: maximum, sum of exponentials,
// probabilities (float32).
__kernel void softmax_3pass(__global float* out, __global const float* inp, int N, int C) {
    int row = get_global_id(0);
    if (row < N) {
        __global const float* x = inp + row * C;
        __global float* y = out + row * C;
        float maxval = -INFINITY;
        for (int i = 0; i < C; i++) {
            if (x[i] > maxval) {
                maxval = x[i];
            }
        }
        float sum = 0.0f;
        for (int i = 0; i < C; i++) {
            sum += exp(x[i] - maxval);
        }
        for (int i = 0; i < C; i++) {
            y[i] = exp(x[i] - maxval) / sum;
        }
    }
}
