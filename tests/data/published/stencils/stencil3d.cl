// The 7-point stencil in OpenCL: a work-item per point of a 3-D range, and a work-item per column.
__kernel void stencil7(__global const float *in, __global float *out, int nx, int ny, int nz, float c0, float c1) {
    int i = get_global_id(0);
    int j = get_global_id(1);
    int k = get_global_id(2);

    if (i > 0 && i < nx - 1 && j > 0 && j < ny - 1 && k > 0 && k < nz - 1) {
        int idx = (k * ny + j) * nx + i;
        out[idx] = c0 * in[idx] + c1 * (in[idx - 1] + in[idx + 1] + in[idx - nx] + in[idx + nx] +
                                        in[idx - nx * ny] + in[idx + nx * ny]);
    }
}

__kernel void stencil7_zloop(__global const float *in, __global float *out, int nx, int ny, int nz, float c0,
                             float c1) {
    int i = get_global_id(0);
    int j = get_global_id(1);

    if (i > 0 && i < nx - 1 && j > 0 && j < ny - 1) {
        for (int k = 1; k < nz - 1; k++) {
            int idx = (k * ny + j) * nx + i;
            out[idx] = c0 * in[idx] + c1 * (in[idx - 1] + in[idx + 1] + in[idx - nx] + in[idx + nx] +
                                            in[idx - nx * ny] + in[idx + nx * ny]);
        }
    }
}
