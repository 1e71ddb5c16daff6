// The OpenCL twin of gelu.cu.
#define GELU_SCALING_FACTOR sqrt(2.0f / M_PI_F)
__kernel void gelu_forward_kernel(__global float* out, __global const float* inp, int N) {
    int i = get_global_id(0);
    if (i < N) {
        float xi = inp[i];
        float cube = 0.044715f * xi * xi * xi;
        out[i] = 0.5f * xi * (1.0f + tanh(GELU_SCALING_FACTOR * (xi + cube)));
    }
}
