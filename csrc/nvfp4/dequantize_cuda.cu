// One thread per 8 consecutive elements: where the 8 share a row and a
// 16-block (all of them when L is a multiple of 8), one 4-byte load of packed
// codes, one scale and one decode scale, and StoreEight; elsewhere (a row's
// tail, the buffer's end) element by element.

#include <cuda_runtime.h>

#include <cstdint>

#include "common/mx_decode.h"
#include "cuda/store_values_cuda.cuh"
#include "common/nvfp4_format.h"
#include "nvfp4/dequantize_cuda.h"

namespace eqx_quant::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;
constexpr int64_t kBlock = 16;

// An E2M1 code's value (0, 0.5, 1, 1.5, 2, 3, 4, 6; sign at bit 3), exact, built
// from its bits (an indexed constant table would live in local memory).
__device__ inline float E2M1Value(uint32_t code) {
  const uint32_t e = (code >> 1) & 3u;
  const uint32_t m = code & 1u;
  const uint32_t magnitude = e != 0 ? ((126u + e) << 23) | (m << 22) : m * 0x3F000000u;
  return __uint_as_float(((code & 8u) << 28) | magnitude);
}

template <bool kF32>
__global__ void __launch_bounds__(kThreads) Decode(Nvfp4DequantizeProblem p) {
  const int64_t total = p.rows * p.cols;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kVec;
  if (first >= total) return;
  const int64_t blocks = (p.cols + kBlock - 1) / kBlock;
  const int64_t rows_per_example = p.rows / p.examples;
  int64_t r = first / p.cols;
  int64_t c = first - r * p.cols;
  const int count = total - first < kVec ? static_cast<int>(total - first) : kVec;
  float values[kVec] = {};
  if (count == kVec && c % kBlock + kVec <= kBlock && c + kVec <= p.cols) {
    // The 8 share a row and a 16-block (every chunk when L is a multiple of 8):
    // one scale, one decode scale.
    const uint32_t packed = *reinterpret_cast<const uint32_t*>(p.codes + first / 2);
    const float scale = E4M3ToFloat(p.scales[r * blocks + c / kBlock]);
    const float decode = p.decode_scales[r / rows_per_example];
    for (int t = 0; t < kVec; ++t) {
      values[t] = (E2M1Value((packed >> (4 * t)) & 0xFu) * scale) * decode;
    }
    StoreEight<kF32>(p.out, first, values, count);
    return;
  }
  for (int t = 0; t < kVec; ++t) {
    if (t < count) {
      const int64_t i = first + t;
      const uint32_t code = (p.codes[i / 2] >> (4 * (i % 2))) & 0xFu;
      const float scale = E4M3ToFloat(p.scales[r * blocks + c / kBlock]);
      const float decode = p.decode_scales[r / rows_per_example];
      values[t] = (E2M1Value(code) * scale) * decode;
      if (++c == p.cols) {
        c = 0;
        ++r;
      }
    }
  }
  StoreEight<kF32>(p.out, first, values, count);
}

}  // namespace

int Nvfp4Dequantize(const Nvfp4DequantizeProblem& p, CUstream_st* stream) {
  const int64_t total = p.rows * p.cols;
  if (total == 0) return 0;
  const int64_t per_cta = static_cast<int64_t>(kThreads) * kVec;
  const int64_t ctas = (total + per_cta - 1) / per_cta;
  if (ctas > 0x7FFFFFFF) return static_cast<int>(cudaErrorInvalidConfiguration);
  if (p.out_f32) {
    Decode<true><<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(p);
  } else {
    Decode<false><<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(p);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace eqx_quant::cuda
