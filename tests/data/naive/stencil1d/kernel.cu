// A 1-D stencil of radius 3 with weights, a thread per point, zero outside the signal (the
// textbook's first version, before its shared-memory one).
#define RADIUS 3

__global__ void stencil_1d(const float *in, const float *weights, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float result = 0.0f;
        for (int j = -RADIUS; j <= RADIUS; j++) {
            if (i + j >= 0 && i + j < n)
                result += weights[j + RADIUS] * in[i + j];
        }
        out[i] = result;
    }
}
