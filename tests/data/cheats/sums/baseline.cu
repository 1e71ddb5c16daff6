// The original: one thread adds a row in turn.
extern "C" __global__ void cheat_sums(const float *x, float *s, int rows, int cols)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float acc = 0.0f;
    for (int i = 0; i < cols; ++i) acc += x[(size_t)r * cols + i];
    s[r] = acc;
}
