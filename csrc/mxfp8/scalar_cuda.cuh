// MXFP8 scalar kernels (sm_90a): one thread per 32-element block
// (QuantizeBlockScalar), scalar loads, for every shape or alignment the tile
// and stream kernels do not take (L % 32 != 0, rows not a multiple of 16
// input bytes, misaligned buffers). Included by mxfp8/quantize_cuda.cu
// only (which launches them); same bytes as the other kernels and the CPU one.

#ifndef EQX_QUANT_CSRC_MXFP8_SCALAR_CUDA_CUH_
#define EQX_QUANT_CSRC_MXFP8_SCALAR_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/fp8_format.h"
#include "common/mxfp8_problem.h"
#include "mxfp8/device_cuda.cuh"

namespace eqx_quant::cuda::mxfp8_scalar {

using mxfp8::QuantizeBlockScalar;

constexpr int kBlock = static_cast<int>(kMxfp8BlockSize);  // 32
constexpr int kScalarThreads = 256;

struct ScalarParams {
  const void* x;
  uint8_t* out;
  uint8_t* scale;
  int64_t length;  // row: L; col: K
  int64_t width;   // row: unused; col: W = C * L
  int64_t blocks;  // row: ceil(L/32); col: ceil(K/32)
  int64_t total;   // threads of work: row: lines * blocks; col: A * blocks * W
};

// Thread b: block b % blocks of line b / blocks (x row-major lines of L).
template <typename In, Fp8Format kFormat>
__global__ void __launch_bounds__(kScalarThreads)
    RowScalarKernel(const __grid_constant__ ScalarParams p) {
  const auto* x = static_cast<const typename In::Storage*>(p.x);
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * kScalarThreads + threadIdx.x;
       b < p.total; b += static_cast<int64_t>(gridDim.x) * kScalarThreads) {
    const int64_t line = b / p.blocks;
    const int64_t first = (b - line * p.blocks) * kBlock;
    const int count =
        static_cast<int>(min(int64_t{kBlock}, p.length - first));
    const int64_t offset = line * p.length + first;
    p.scale[b] =
        QuantizeBlockScalar<In, kFormat>(x + offset, p.out + offset, 1, count);
  }
}

// Thread i = (a * blocks + kb) * W + col: column col of K-block kb of slice a
// (which is also its col_scale index).
template <typename In, Fp8Format kFormat>
__global__ void __launch_bounds__(kScalarThreads)
    ColScalarKernel(const __grid_constant__ ScalarParams p) {
  const auto* x = static_cast<const typename In::Storage*>(p.x);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kScalarThreads + threadIdx.x;
       i < p.total; i += static_cast<int64_t>(gridDim.x) * kScalarThreads) {
    const int64_t col = i % p.width;
    const int64_t slab = i / p.width;  // a * blocks + kb
    const int64_t a = slab / p.blocks;
    const int64_t k0 = (slab - a * p.blocks) * kBlock;
    const int count =
        static_cast<int>(min(int64_t{kBlock}, p.length - k0));
    const int64_t offset = (a * p.length + k0) * p.width + col;
    p.scale[i] = QuantizeBlockScalar<In, kFormat>(x + offset, p.out + offset,
                                                  p.width, count);
  }
}

}  // namespace eqx_quant::cuda::mxfp8_scalar

#endif  // EQX_QUANT_CSRC_MXFP8_SCALAR_CUDA_CUH_
