// A 1-D stencil of radius 3 with weights, a work-item per point, zero outside the signal.
#define RADIUS 3

__kernel void stencil_1d(__global const float *in, __global const float *weights, __global float *out, int n) {
    int i = get_global_id(0);
    if (i < n) {
        float result = 0.0f;
        for (int j = -RADIUS; j <= RADIUS; j++) {
            if (i + j >= 0 && i + j < n)
                result += weights[j + RADIUS] * in[i + j];
        }
        out[i] = result;
    }
}
