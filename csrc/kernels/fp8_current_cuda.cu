// Current scaling of a rowwise-only example in one cooperative launch
// (sm_90a): amax, grid-wide sync, scale, cast. The float semantics are those
// of fp8_quantize_cuda.cu (bit-identical to the CPU kernel).
//
// One block of kThreads per SM owns a contiguous range of the example's
// 16-byte input vectors.
//   Phase 1 reads its range once, front to back, kAmaxUnroll vectors in flight
//   per thread, for the block max; the first `kept` vectors of the range are
//   also stored in shared memory (up to kKeptVectors, ~208 KiB per SM, ~27 MB
//   on an H200). One atomicMax per block, then a grid-wide sync.
//   Phase 2: every block derives the same scale from the finished amax
//   (ScaleFromAmax, one IEEE division), block 0 writes scale_inv, and the
//   range is cast back to front: the most recently read vectors first (still
//   in L2), the kept ones last (from shared memory). Only the rest of x is
//   read from DRAM a second time, which is what two plain passes cannot
//   avoid: at 4096^2 bf16 (32 MiB) nothing is; at 8192^2 about half.
// InitKernel (zeroed amax) runs before this launch in plain stream order.

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"
#include "kernels/fp8_quantize_cuda.h"
#include "kernels/fp8_quantize_cuda_device.cuh"
#include "kernels/fp8_quantize_cuda_launch.h"

namespace eqx_quant::cuda::fp8 {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;
constexpr int kAmaxUnroll = 8;  // phase 1: 128 KiB of loads in flight per SM
constexpr int kCastUnroll = 4;  // phase 2: the cast needs more registers
constexpr int64_t kKeptVectors = int64_t{13} * kThreads;  // 208 KiB
constexpr int64_t kKeptBytes = kKeptVectors * 16;

struct CurrentCastParams {
  const void* x;
  const float* fallback;  // the scale for an amax that is 0, NaN or Inf
  uint8_t* row;
  float* scale_inv;
  float* amax;            // zeroed by InitKernel
  int64_t vectors;        // 16-byte input vectors (the example, exactly)
  int64_t per_block;      // vectors per block (the last block: the rest)
  int64_t kept;           // vectors per block kept in shared memory
};

template <typename In, Fp8Format kFormat>
__global__ void __launch_bounds__(kThreads, 1)
    CurrentCastKernel(const __grid_constant__ CurrentCastParams p) {
  constexpr int kVec = In::kVec;
  extern __shared__ __align__(16) uint4 kept[];
  __shared__ float warp_max[kThreads / 32];
  const int tid = threadIdx.x;
  const uint4* x = static_cast<const uint4*>(p.x);
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * p.per_block;
  const int64_t count = max(int64_t{0}, min(p.per_block, p.vectors - begin));
  const int64_t kept_count = min(p.kept, count);

  // Phase 1: the block max, keeping the first kept_count vectors.
  float amax = 0.0f;
  for (int64_t base = 0; base < count; base += int64_t{kThreads} * kAmaxUnroll) {
    uint4 raw[kAmaxUnroll];
#pragma unroll
    for (int u = 0; u < kAmaxUnroll; ++u) {
      const int64_t j = base + u * kThreads + tid;
      if (j < count) raw[u] = LoadStreaming(x + begin + j);
    }
#pragma unroll
    for (int u = 0; u < kAmaxUnroll; ++u) {
      const int64_t j = base + u * kThreads + tid;
      if (j < count) {
        float v[kVec];
        In::Unpack(raw[u], v);
#pragma unroll
        for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, fabsf(v[e]));
        if (j < kept_count) kept[j] = raw[u];
      }
    }
  }
  amax = BlockMax<kThreads>(amax, warp_max);
  if (tid == 0 && amax > 0.0f) {
    atomicMax(reinterpret_cast<unsigned int*>(p.amax), __float_as_uint(amax));
  }
  cg::this_grid().sync();

  // Phase 2: the scale of the finished amax, then the cast, back to front.
  const float scale = ScaleFromAmax(__ldcg(p.amax), *p.fallback, kFormat);
  if (blockIdx.x == 0 && tid == 0) *p.scale_inv = ScaleInverse(scale);
  constexpr int64_t kStep = int64_t{kThreads} * kCastUnroll;
  const int64_t steps = (count + kStep - 1) / kStep;
  for (int64_t step = steps - 1; step >= 0; --step) {
    const int64_t base = step * kStep;
    uint4 raw[kCastUnroll];
#pragma unroll
    for (int u = 0; u < kCastUnroll; ++u) {
      const int64_t j = base + u * kThreads + tid;
      if (j < count) {
        raw[u] = j < kept_count ? kept[j] : LoadStreaming(x + begin + j);
      }
    }
#pragma unroll
    for (int u = 0; u < kCastUnroll; ++u) {
      const int64_t j = base + u * kThreads + tid;
      if (j < count) {
        float v[kVec];
        In::Unpack(raw[u], v);
        uint32_t q[kVec / 4];
        CastVec<kFormat>(v, scale, q);
        uint8_t* dst = p.row + (begin + j) * kVec;
        if constexpr (kVec == 8) {
          *reinterpret_cast<uint2*>(dst) = make_uint2(q[0], q[1]);
        } else {
          *reinterpret_cast<uint32_t*>(dst) = q[0];
        }
      }
    }
  }
}

template <typename In, Fp8Format kFormat>
LaunchStatus LaunchCurrentCastOf(const Fp8QuantizeProblem& problem,
                                 const Fp8QuantizeBuffers& buffers,
                                 cudaStream_t stream, int sms) {
  auto* kernel = &CurrentCastKernel<In, kFormat>;
  CurrentCastParams p;
  p.x = buffers.x;
  p.fallback = buffers.scale;
  p.row = buffers.row;
  p.scale_inv = buffers.scale_inv;
  p.amax = buffers.amax;
  p.vectors = problem.rows * problem.cols / In::kVec;
  // At most one block per SM (all must be resident for the grid sync), and
  // no block with less than one phase-1 step of work.
  const int64_t step = int64_t{kThreads} * kAmaxUnroll;
  int64_t grid = std::max<int64_t>(
      1, std::min<int64_t>(sms, (p.vectors + step - 1) / step));
  cudaError_t error = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(kKeptBytes));
  if (error != cudaSuccess) {
    return Failed(error, "setting CurrentCastKernel's shared memory");
  }
  // A cooperative grid must be resident at once (fewer SMs may be available
  // to this context than the device has).
  static const int64_t resident =
      int64_t{BlocksPerSm(kernel, kThreads, static_cast<size_t>(kKeptBytes))} *
      sms;
  grid = std::min(grid, resident);
  p.per_block = (p.vectors + grid - 1) / grid;
  p.kept = std::min(p.per_block, kKeptVectors);
  const size_t shared_bytes = static_cast<size_t>(p.kept) * 16;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  error = cudaLaunchKernelEx(&config, kernel, p);
  if (error == cudaSuccess) error = cudaGetLastError();
  if (error != cudaSuccess) return Failed(error, "launching CurrentCastKernel");
  return LaunchStatus{};
}

}  // namespace

bool CurrentCastApplies(const Fp8QuantizeProblem& problem,
                        const Fp8QuantizeBuffers& buffers) {
  const int vec = problem.input_type == InputType::kF32 ? 4 : 8;
  return problem.scale_from_amax && problem.batch == 1 && problem.rowwise &&
         !problem.colwise && !problem.with_dbias &&
         (problem.rows * problem.cols) % vec == 0 && Aligned16(buffers.x) &&
         Aligned16(buffers.row);
}

LaunchStatus LaunchCurrentCast(const Fp8QuantizeProblem& problem,
                               const Fp8QuantizeBuffers& buffers,
                               cudaStream_t stream, int sms) {
  return DispatchTypes(problem, [&](auto input, auto format) {
    return LaunchCurrentCastOf<decltype(input), decltype(format)::value>(
        problem, buffers, stream, sms);
  });
}

}  // namespace eqx_quant::cuda::fp8
