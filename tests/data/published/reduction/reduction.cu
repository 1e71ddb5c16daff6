// Parallel sum, seven kernels in one file the way the CUDA samples teach it: each block reduces
// its part of the input in shared memory and writes one partial sum per block; the host (or a
// second launch) adds the partials. Each kernel fixes one weakness of the one before.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

namespace cg = cooperative_groups;

// extern __shared__ arrays of a template type would clash between instantiations: this helper
// hands out the dynamic shared memory cast to T*.
template <class T>
struct SharedMemory {
  __device__ inline operator T *() {
    extern __shared__ int __smem[];
    return (T *)__smem;
  }

  __device__ inline operator const T *() const {
    extern __shared__ int __smem[];
    return (T *)__smem;
  }
};

// double needs its own alignment
template <>
struct SharedMemory<double> {
  __device__ inline operator double *() {
    extern __shared__ double __smem_d[];
    return (double *)__smem_d;
  }

  __device__ inline operator const double *() const {
    extern __shared__ double __smem_d[];
    return (double *)__smem_d;
  }
};

// reduce0: interleaved addressing; the threads that work at each step are those whose index is a
// multiple of 2s, so every warp diverges (and % is slow).
template <class T>
__global__ void reduce0(T *g_idata, T *g_odata, unsigned int n) {
  cg::thread_block cta = cg::this_thread_block();
  T *sdata = SharedMemory<T>();

  // one element a thread into shared memory
  unsigned int tid = threadIdx.x;
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;

  sdata[tid] = (i < n) ? g_idata[i] : 0;

  cg::sync(cta);

  // the tree, in shared memory
  for (unsigned int s = 1; s < blockDim.x; s *= 2) {
    if ((tid % (2 * s)) == 0) {
      sdata[tid] += sdata[tid + s];
    }

    cg::sync(cta);
  }

  // thread 0 writes this block's result
  if (tid == 0) g_odata[blockIdx.x] = sdata[0];
}

// reduce1: interleaved addressing with a strided index instead of the modulo, so the working
// threads are contiguous (but shared memory banks conflict)
template <class T>
__global__ void reduce1(T *g_idata, T *g_odata, unsigned int n) {
  cg::thread_block cta = cg::this_thread_block();
  T *sdata = SharedMemory<T>();

  unsigned int tid = threadIdx.x;
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;

  sdata[tid] = (i < n) ? g_idata[i] : 0;

  cg::sync(cta);

  for (unsigned int s = 1; s < blockDim.x; s *= 2) {
    int index = 2 * s * tid;

    if (index < blockDim.x) {
      sdata[index] += sdata[index + s];
    }

    cg::sync(cta);
  }

  if (tid == 0) g_odata[blockIdx.x] = sdata[0];
}

// reduce2: sequential addressing, no bank conflicts
template <class T>
__global__ void reduce2(T *g_idata, T *g_odata, unsigned int n) {
  cg::thread_block cta = cg::this_thread_block();
  T *sdata = SharedMemory<T>();

  unsigned int tid = threadIdx.x;
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;

  sdata[tid] = (i < n) ? g_idata[i] : 0;

  cg::sync(cta);

  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) {
      sdata[tid] += sdata[tid + s];
    }

    cg::sync(cta);
  }

  if (tid == 0) g_odata[blockIdx.x] = sdata[0];
}

// reduce3: as reduce2, but each thread adds two elements while loading (half the blocks), and
// keeps its running sum in a register
template <class T>
__global__ void reduce3(T *g_idata, T *g_odata, unsigned int n) {
  cg::thread_block cta = cg::this_thread_block();
  T *sdata = SharedMemory<T>();

  unsigned int tid = threadIdx.x;
  unsigned int i = blockIdx.x * (blockDim.x * 2) + threadIdx.x;

  T mySum = (i < n) ? g_idata[i] : 0;

  if (i + blockDim.x < n) mySum += g_idata[i + blockDim.x];

  sdata[tid] = mySum;
  cg::sync(cta);

  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) {
      sdata[tid] = mySum = mySum + sdata[tid + s];
    }

    cg::sync(cta);
  }

  if (tid == 0) g_odata[blockIdx.x] = mySum;
}

// The last warp needs no barrier while its threads run in lockstep: unrolled by hand on a volatile
// pointer (each load and store goes to shared memory). Only threads 0..31 call it.
template <class T>
__device__ void warpReduce(volatile T *sdata, unsigned int tid) {
  sdata[tid] += sdata[tid + 32];
  sdata[tid] += sdata[tid + 16];
  sdata[tid] += sdata[tid + 8];
  sdata[tid] += sdata[tid + 4];
  sdata[tid] += sdata[tid + 2];
  sdata[tid] += sdata[tid + 1];
}

// reduce4: as reduce3, but the tree stops at 64 slots and the last warp finishes without
// barriers (needs blockDim.x >= 64)
template <class T>
__global__ void reduce4(T *g_idata, T *g_odata, unsigned int n) {
  T *sdata = SharedMemory<T>();

  unsigned int tid = threadIdx.x;
  unsigned int i = blockIdx.x * (blockDim.x * 2) + threadIdx.x;

  T mySum = (i < n) ? g_idata[i] : 0;

  if (i + blockDim.x < n) mySum += g_idata[i + blockDim.x];

  sdata[tid] = mySum;
  __syncthreads();

  for (unsigned int s = blockDim.x / 2; s > 32; s >>= 1) {
    if (tid < s) {
      sdata[tid] = mySum = mySum + sdata[tid + s];
    }

    __syncthreads();
  }

  if (tid < 32) warpReduce(sdata, tid);

  if (tid == 0) g_odata[blockIdx.x] = sdata[0];
}

// the last warp again, its steps chosen at compile time by the block size
template <class T, unsigned int blockSize>
__device__ void warpReduceUnrolled(volatile T *sdata, unsigned int tid) {
  if (blockSize >= 64) sdata[tid] += sdata[tid + 32];
  if (blockSize >= 32) sdata[tid] += sdata[tid + 16];
  if (blockSize >= 16) sdata[tid] += sdata[tid + 8];
  if (blockSize >= 8) sdata[tid] += sdata[tid + 4];
  if (blockSize >= 4) sdata[tid] += sdata[tid + 2];
  if (blockSize >= 2) sdata[tid] += sdata[tid + 1];
}

// reduce5: the block size a template argument, so the whole tree unrolls and the levels a block
// of this size does not need disappear
template <class T, unsigned int blockSize>
__global__ void reduce5(T *g_idata, T *g_odata, unsigned int n) {
  T *sdata = SharedMemory<T>();

  unsigned int tid = threadIdx.x;
  unsigned int i = blockIdx.x * (blockSize * 2) + threadIdx.x;

  T mySum = (i < n) ? g_idata[i] : 0;

  if (i + blockSize < n) mySum += g_idata[i + blockSize];

  sdata[tid] = mySum;
  __syncthreads();

  if (blockSize >= 1024) {
    if (tid < 512) { sdata[tid] += sdata[tid + 512]; }
    __syncthreads();
  }
  if (blockSize >= 512) {
    if (tid < 256) { sdata[tid] += sdata[tid + 256]; }
    __syncthreads();
  }
  if (blockSize >= 256) {
    if (tid < 128) { sdata[tid] += sdata[tid + 128]; }
    __syncthreads();
  }
  if (blockSize >= 128) {
    if (tid < 64) { sdata[tid] += sdata[tid + 64]; }
    __syncthreads();
  }

  if (tid < 32) warpReduceUnrolled<T, blockSize>(sdata, tid);

  if (tid == 0) g_odata[blockIdx.x] = sdata[0];
}

// reduce6: each thread first adds as many pairs of elements as the grid leaves it (a grid-stride
// loop: a fixed number of blocks whatever n), then the unrolled tree of reduce5
template <class T, unsigned int blockSize>
__global__ void reduce6(T *g_idata, T *g_odata, unsigned int n) {
  T *sdata = SharedMemory<T>();

  unsigned int tid = threadIdx.x;
  unsigned int i = blockIdx.x * (blockSize * 2) + threadIdx.x;
  unsigned int gridSize = blockSize * 2 * gridDim.x;

  T mySum = 0;

  while (i < n) {
    mySum += g_idata[i];

    if (i + blockSize < n) mySum += g_idata[i + blockSize];

    i += gridSize;
  }

  sdata[tid] = mySum;
  __syncthreads();

  if (blockSize >= 1024) {
    if (tid < 512) { sdata[tid] += sdata[tid + 512]; }
    __syncthreads();
  }
  if (blockSize >= 512) {
    if (tid < 256) { sdata[tid] += sdata[tid + 256]; }
    __syncthreads();
  }
  if (blockSize >= 256) {
    if (tid < 128) { sdata[tid] += sdata[tid + 128]; }
    __syncthreads();
  }
  if (blockSize >= 128) {
    if (tid < 64) { sdata[tid] += sdata[tid + 64]; }
    __syncthreads();
  }

  if (tid < 32) warpReduceUnrolled<T, blockSize>(sdata, tid);

  if (tid == 0) g_odata[blockIdx.x] = sdata[0];
}

// the host's wrapper: which kernel, how many threads and blocks
template <class T>
void reduce(int size, int threads, int blocks, int whichKernel, T *d_idata, T *d_odata) {
  dim3 dimBlock(threads, 1, 1);
  dim3 dimGrid(blocks, 1, 1);

  // a block of 32 threads or fewer still takes 64 slots of shared memory (the tree reads past
  // the last thread)
  int smemSize = (threads <= 32) ? 2 * threads * sizeof(T) : threads * sizeof(T);

  switch (whichKernel) {
    case 0:
      reduce0<T><<<dimGrid, dimBlock, smemSize>>>(d_idata, d_odata, size);
      break;
    case 1:
      reduce1<T><<<dimGrid, dimBlock, smemSize>>>(d_idata, d_odata, size);
      break;
    case 2:
      reduce2<T><<<dimGrid, dimBlock, smemSize>>>(d_idata, d_odata, size);
      break;
    case 3:
      reduce3<T><<<dimGrid, dimBlock, smemSize>>>(d_idata, d_odata, size);
      break;
    case 4:
      reduce4<T><<<dimGrid, dimBlock, smemSize>>>(d_idata, d_odata, size);
      break;
    case 5:
      // the block size is compiled in: one instantiation per size the host may choose
      switch (threads) {
        case 512:
          reduce5<T, 512><<<dimGrid, dimBlock, smemSize>>>(d_idata, d_odata, size);
          break;
        case 256:
          reduce5<T, 256><<<dimGrid, dimBlock, smemSize>>>(d_idata, d_odata, size);
          break;
        case 128:
          reduce5<T, 128><<<dimGrid, dimBlock, smemSize>>>(d_idata, d_odata, size);
          break;
      }
      break;
    case 6:
    default:
      switch (threads) {
        case 512:
          reduce6<T, 512><<<dimGrid, dimBlock, smemSize>>>(d_idata, d_odata, size);
          break;
        case 256:
          reduce6<T, 256><<<dimGrid, dimBlock, smemSize>>>(d_idata, d_odata, size);
          break;
        case 128:
          reduce6<T, 128><<<dimGrid, dimBlock, smemSize>>>(d_idata, d_odata, size);
          break;
      }
      break;
  }
}

template void reduce<int>(int size, int threads, int blocks, int whichKernel, int *d_idata, int *d_odata);
template void reduce<float>(int size, int threads, int blocks, int whichKernel, float *d_idata, float *d_odata);
template void reduce<double>(int size, int threads, int blocks, int whichKernel, double *d_idata,
                             double *d_odata);
