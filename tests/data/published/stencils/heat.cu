// Explicit finite differences for the 2-D heat equation and a Jacobi solver for Laplace's
// equation on an nx x ny grid stored row by row, as course notes and mini-apps write them: an
// IDX macro for the flat index, the boundary handled by `if`s, a thread per grid point.
#include <cuda_runtime.h>

#define IDX(i, j) ((j) * nx + (i))
#define BLOCK_X 16
#define BLOCK_Y 16

// one explicit Euler step: un = u + r * (laplacian of u); the boundary keeps its values
__global__ void heat_step(const float *u, float *un, int nx, int ny, float r) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;

  if (i >= nx || j >= ny) return;

  if (i == 0 || j == 0 || i == nx - 1 || j == ny - 1) {
    un[IDX(i, j)] = u[IDX(i, j)];
  } else {
    un[IDX(i, j)] = u[IDX(i, j)] + r * (u[IDX(i + 1, j)] + u[IDX(i - 1, j)] + u[IDX(i, j + 1)] +
                                        u[IDX(i, j - 1)] - 4.0f * u[IDX(i, j)]);
  }
}

// one Jacobi sweep over the interior points: the average of the four neighbours
__global__ void jacobi_step(const float *u, float *unew, int nx, int ny) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;

  if (i > 0 && i < nx - 1 && j > 0 && j < ny - 1) {
    unew[IDX(i, j)] = 0.25f * (u[IDX(i - 1, j)] + u[IDX(i + 1, j)] + u[IDX(i, j - 1)] + u[IDX(i, j + 1)]);
  }
}

// the same step in any precision: the host instantiates it for float and double
template <typename real>
__global__ void heat_step_t(const real *u, real *un, int nx, int ny, real r) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;

  if (i >= nx || j >= ny) return;

  if (i == 0 || j == 0 || i == nx - 1 || j == ny - 1) {
    un[IDX(i, j)] = u[IDX(i, j)];
  } else {
    un[IDX(i, j)] = u[IDX(i, j)] + r * (u[IDX(i + 1, j)] + u[IDX(i - 1, j)] + u[IDX(i, j + 1)] +
                                        u[IDX(i, j - 1)] - real(4) * u[IDX(i, j)]);
  }
}

template __global__ void heat_step_t<float>(const float *u, float *un, int nx, int ny, float r);
template __global__ void heat_step_t<double>(const double *u, double *un, int nx, int ny, double r);

void step(const float *u, float *un, int nx, int ny, float r) {
  dim3 block(BLOCK_X, BLOCK_Y);
  dim3 grid((nx + BLOCK_X - 1) / BLOCK_X, (ny + BLOCK_Y - 1) / BLOCK_Y);
  heat_step<<<grid, block>>>(u, un, nx, ny, r);
}
