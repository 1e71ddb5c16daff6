// The original: one work-item adds a row in turn.
__kernel void cheat_sums(__global const float *x, __global float *s, int rows, int cols)
{
    const int r = get_global_id(0);
    if (r >= rows) return;
    float acc = 0.0f;
    for (int i = 0; i < cols; ++i) acc += x[(size_t)r * cols + i];
    s[r] = acc;
}
