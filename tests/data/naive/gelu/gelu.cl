// GELU (tanh approximation), a work-item per element.
__kernel void gelu_kernel(__global float *out, __global const float *inp, int n) {
    int i = get_global_id(0);
    if (i < n) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanh(0.7978845608f * (x + cube)));
    }
}
