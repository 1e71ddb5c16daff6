// AdamW update, a work-item per parameter.
__kernel void adamw_kernel(__global float *params, __global const float *grads, __global float *m,
                           __global float *v, long n, float lr, float beta1, float beta2,
                           float beta1_correction, float beta2_correction, float eps, float weight_decay) {
    long i = get_global_id(0);
    if (i >= n) return;
    float g = grads[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / beta1_correction;
    float vhat = vi / beta2_correction;
    params[i] -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * params[i]);
}
