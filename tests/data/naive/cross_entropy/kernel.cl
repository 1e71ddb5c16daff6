// Cross-entropy from logits, one work-item per row: the loss -log softmax(logits)[target] of each
// row, and its gradient with respect to the logits, (softmax - one_hot(target)) * dloss (float32).
__kernel void cross_entropy(__global float* losses, __global float* dlogits, __global const float* logits,
                            __global const int* targets, float dloss, int B, int V) {
    int b = get_global_id(0);
    if (b < B) {
        __global const float* x = logits + (long)b * V;
        __global float* dx = dlogits + (long)b * V;
        int t = targets[b];
        float maxval = -INFINITY;
        for (int i = 0; i < V; i++) {
            maxval = fmax(maxval, x[i]);
        }
        float sum = 0.0f;
        for (int i = 0; i < V; i++) {
            sum += exp(x[i] - maxval);
        }
        float logsum = log(sum);
        losses[b] = logsum + maxval - x[t];
        for (int i = 0; i < V; i++) {
            float p = exp(x[i] - maxval) / sum;
            dx[i] = (p - (i == t ? 1.0f : 0.0f)) * dloss;
        }
    }
}
