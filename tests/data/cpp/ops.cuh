// A kernel template in a header, as an inference library publishes it: no explicit instantiation
// here (its launcher, elsewhere, instantiates it). `kerntune init ops.cuh --entry
// 'ops::scale_rows<float, 256>'` writes the instantiation in a source of its own.
#pragma once

namespace ops {

template <typename T, int BLOCK>
__global__ void __launch_bounds__(BLOCK) scale_rows(T* __restrict__ out, const T* __restrict__ x, float factor, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) {
        out[i] = x[i] * T(factor);
    }
}

}  // namespace ops
