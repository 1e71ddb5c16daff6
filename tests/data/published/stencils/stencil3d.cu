// A 7-point stencil on an nx x ny x nz grid (x fastest), as 3-D finite-difference codes first
// write it: a thread per point on a 3-D grid of blocks, and the same update with a thread per
// (x, y) column marching along z.
#include <cuda_runtime.h>

// out = c0 * centre + c1 * (sum of the six face neighbours), interior points only
__global__ void stencil7(const float *in, float *out, int nx, int ny, int nz, float c0, float c1) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  int k = blockIdx.z * blockDim.z + threadIdx.z;

  if (i > 0 && i < nx - 1 && j > 0 && j < ny - 1 && k > 0 && k < nz - 1) {
    int idx = (k * ny + j) * nx + i;
    out[idx] = c0 * in[idx] + c1 * (in[idx - 1] + in[idx + 1] + in[idx - nx] + in[idx + nx] +
                                    in[idx - nx * ny] + in[idx + nx * ny]);
  }
}

// the same, a thread per (x, y) column looping over z
__global__ void stencil7_zloop(const float *in, float *out, int nx, int ny, int nz, float c0, float c1) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;

  if (i > 0 && i < nx - 1 && j > 0 && j < ny - 1) {
    for (int k = 1; k < nz - 1; k++) {
      int idx = (k * ny + j) * nx + i;
      out[idx] = c0 * in[idx] + c1 * (in[idx - 1] + in[idx + 1] + in[idx - nx] + in[idx + nx] +
                                      in[idx - nx * ny] + in[idx + nx * ny]);
    }
  }
}
