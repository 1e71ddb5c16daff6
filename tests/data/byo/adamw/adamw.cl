float lerp1(float start, float end, float weight) { return fma(weight, end, fma(-weight, start, start)); }

__kernel void adamw_kernel2(__global float* params_memory, __global const float* grads_memory,
                            __global float* m_memory, __global float* v_memory, long num_parameters,
                            float learning_rate, float beta1, float beta2, float beta1_correction,
                            float beta2_correction, float eps, float weight_decay) {
    int i = get_global_id(0);
    if (i >= num_parameters) return;
    float grad = grads_memory[i];
    float m = m_memory[i];
    float v = v_memory[i];
    m = lerp1(grad, m, beta1);
    m_memory[i] = m;
    v = lerp1(grad * grad, v, beta2);
    v_memory[i] = v;
    m /= beta1_correction;
    v /= beta2_correction;
    params_memory[i] -= learning_rate * (m / (sqrt(v) + eps) + weight_decay * params_memory[i]);
}
