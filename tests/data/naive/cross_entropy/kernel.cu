// Cross-entropy from logits, one thread per row: the loss -log softmax(logits)[target] of each
// row, and its gradient with respect to the logits, (softmax - one_hot(target)) * dloss (float32).
__global__ void cross_entropy(float* losses, float* dlogits, const float* logits, const int* targets,
                              float dloss, int B, int V) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < B) {
        const float* x = logits + (long)b * V;
        float* dx = dlogits + (long)b * V;
        int t = targets[b];
        float maxval = -INFINITY;
        for (int i = 0; i < V; i++) {
            maxval = fmaxf(maxval, x[i]);
        }
        float sum = 0.0f;
        for (int i = 0; i < V; i++) {
            sum += expf(x[i] - maxval);
        }
        float logsum = logf(sum);
        losses[b] = logsum + maxval - x[t];
        for (int i = 0; i < V; i++) {
            float p = expf(x[i] - maxval) / sum;
            dx[i] = (p - (i == t ? 1.0f : 0.0f)) * dloss;
        }
    }
}
