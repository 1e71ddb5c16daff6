// c = a + b. Each work-item handles ITEMS elements, BLOCK apart.
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ITEMS
#define ITEMS 1
#endif

__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void vector_add(__global const float *restrict a, __global const float *restrict b,
                __global float *restrict c, int n)
{
    const long base = (long)get_group_id(0) * (BLOCK * ITEMS) + get_local_id(0);
    for (int k = 0; k < ITEMS; ++k) {
        const long i = base + (long)k * BLOCK;
        if (i < n) c[i] = a[i] + b[i];
    }
}
