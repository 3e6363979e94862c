// Shared by the standalone probes (not part of the library; each probe is one
// translation unit, so the kernel below is defined once per program): error
// checks, the median time per launch of a body of back-to-back launches with
// CUDA events (8 warm-up calls, then kBatches batches of kLaunches calls), the
// D2D copy they are compared with, a bf16 test input, and the bf16 -> e4m3
// cast of 8 values with the library's convert, loads and stores
// (cuda/fp8_convert.cuh: probes are built with -I csrc).

#ifndef EQX_QUANT_CI_PROBES_PROBE_COMMON_H_
#define EQX_QUANT_CI_PROBES_PROBE_COMMON_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/fp8_convert.cuh"

namespace probe {

using eqx_quant::cuda::LoadStreaming;
using eqx_quant::cuda::StoreStreaming16;

inline void Check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

// Median over kBatches of (event time of kLaunches calls of body(i)) /
// kLaunches, in microseconds.
template <int kLaunches, int kBatches, typename Body>
double MedianMicroseconds(Body body, cudaStream_t stream) {
  cudaEvent_t start;
  cudaEvent_t stop;
  Check(cudaEventCreate(&start), "event");
  Check(cudaEventCreate(&stop), "event");
  for (int i = 0; i < 8; ++i) body(i);
  std::vector<double> us;
  for (int b = 0; b < kBatches; ++b) {
    Check(cudaEventRecord(start, stream), "record");
    for (int i = 0; i < kLaunches; ++i) body(i);
    Check(cudaEventRecord(stop, stream), "record");
    Check(cudaEventSynchronize(stop), "synchronize");
    float ms = 0.0f;
    Check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    us.push_back(1000.0 * ms / kLaunches);
  }
  std::sort(us.begin(), us.end());
  Check(cudaEventDestroy(start), "event");
  Check(cudaEventDestroy(stop), "event");
  return us[kBatches / 2];
}

// cudaMemcpyAsync device to device of `bytes`, copy i from src[(i + 1) % n]
// to dst[i % n]: median microseconds per copy.
template <int kLaunches, int kBatches, typename T>
double CopyMicroseconds(const std::vector<T*>& src, const std::vector<T*>& dst,
                        int64_t bytes, cudaStream_t stream) {
  return MedianMicroseconds<kLaunches, kBatches>(
      [&](int i) {
        Check(cudaMemcpyAsync(dst[i % dst.size()], src[(i + 1) % src.size()],
                              bytes, cudaMemcpyDeviceToDevice, stream),
              "memcpy");
      },
      stream);
}

// 8 FP8 bytes with the library's streaming store.
__device__ __forceinline__ void StoreStreaming8(uint2* p, uint2 v) {
  const uint32_t q[2] = {v.x, v.y};
  eqx_quant::cuda::StoreCastWords<2>(p, q);
}

// Two f32 -> two e4m3 bytes (a in the low byte), the library's convert.
__device__ __forceinline__ uint32_t CastPair(float a, float b) {
  return eqx_quant::cuda::CvtPair<eqx_quant::Fp8Format::kE4M3Fn>(a, b);
}

// 8 bf16 values x scale -> 8 e4m3 codes (two words).
__device__ __forceinline__ uint2 Cast8(uint4 raw, float scale) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t out[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const float a = __fmul_rn(__uint_as_float(w[2 * k] << 16), scale);
    const float b = __fmul_rn(__uint_as_float(w[2 * k] & 0xFFFF0000u), scale);
    const float c = __fmul_rn(__uint_as_float(w[2 * k + 1] << 16), scale);
    const float d = __fmul_rn(__uint_as_float(w[2 * k + 1] & 0xFFFF0000u), scale);
    out[k] = CastPair(a, b) | (CastPair(c, d) << 16);
  }
  return make_uint2(out[0], out[1]);
}

// Random bf16 pairs in [-4, 4) (exponents 125..129), 8 per vector.
__global__ void Fill(uint4* x, int64_t vectors, uint32_t seed) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < vectors;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    uint32_t w[4];
    for (int k = 0; k < 4; ++k) {
      h ^= h >> 15;
      h *= 2246822519u;
      h ^= h >> 13;
      const uint32_t lo =
          (h & 0x8000u) | ((125u + (h >> 16) % 4u) << 7) | (h & 0x7Fu);
      const uint32_t hi = ((h >> 1) & 0x8000u) |
                          ((125u + (h >> 20) % 4u) << 7) | ((h >> 7) & 0x7Fu);
      w[k] = lo | (hi << 16);
    }
    x[i] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

}  // namespace probe

#endif  // EQX_QUANT_CI_PROBES_PROBE_COMMON_H_
