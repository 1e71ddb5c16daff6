// c = a + b, one element per work-item: the kernel as first written, before templating.
__kernel void vector_add(__global const float *a, __global const float *b, __global float *c, int n)
{
    const int i = get_global_id(0);
    if (i < n) c[i] = a[i] + b[i];
}
