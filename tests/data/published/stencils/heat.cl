// The heat step and the Jacobi sweep in OpenCL: the IDX macro, the boundary's `if`s, a work-item
// per grid point.
#define IDX(i, j) ((j) * nx + (i))

__kernel void heat_step(__global const float *u, __global float *un, int nx, int ny, float r) {
    int i = get_global_id(0);
    int j = get_global_id(1);

    if (i >= nx || j >= ny) return;

    if (i == 0 || j == 0 || i == nx - 1 || j == ny - 1) {
        un[IDX(i, j)] = u[IDX(i, j)];
    } else {
        un[IDX(i, j)] = u[IDX(i, j)] + r * (u[IDX(i + 1, j)] + u[IDX(i - 1, j)] + u[IDX(i, j + 1)] +
                                            u[IDX(i, j - 1)] - 4.0f * u[IDX(i, j)]);
    }
}

__kernel void jacobi_step(__global const float *u, __global float *unew, int nx, int ny) {
    int i = get_global_id(0);
    int j = get_global_id(1);

    if (i > 0 && i < nx - 1 && j > 0 && j < ny - 1) {
        unew[IDX(i, j)] = 0.25f * (u[IDX(i - 1, j)] + u[IDX(i + 1, j)] + u[IDX(i, j - 1)] + u[IDX(i, j + 1)]);
    }
}
