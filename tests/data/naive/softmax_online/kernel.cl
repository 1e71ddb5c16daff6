// Row softmax, one work-item per row: the maximum and the sum of exponentials in one pass (the
// sum rescaled whenever the maximum grows), then the probabilities (float32).
__kernel void softmax_online(__global float* out, __global const float* inp, int N, int C) {
    int i = get_global_id(0);
    if (i < N) {
        __global const float* inp_row = inp + i * C;
        __global float* out_row = out + i * C;
        float maxval = -INFINITY;
        float sum = 0.0f;
        for (int j = 0; j < C; j++) {
            float maxval_prev = maxval;
            if (inp_row[j] > maxval) {
                maxval = inp_row[j];
                sum = sum * exp(maxval_prev - maxval) + exp(inp_row[j] - maxval);
            } else {
                sum += exp(inp_row[j] - maxval);
            }
        }
        for (int j = 0; j < C; j++) {
            out_row[j] = exp(inp_row[j] - maxval) / sum;
        }
    }
}
