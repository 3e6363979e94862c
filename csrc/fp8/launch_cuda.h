// Host-side launch helpers of the FP8 tensor-scaling CUDA kernels: SM count,
// launch with programmatic dependent launch / clusters / cooperative groups,
// occupancy, status values, and the dispatch over input type x FP8 format.
// Included by .cu files only.

#ifndef EQX_QUANT_CSRC_FP8_LAUNCH_CUDA_H_
#define EQX_QUANT_CSRC_FP8_LAUNCH_CUDA_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"
#include "cuda/sm_count.h"
#include "fp8/device_cuda.cuh"
#include "fp8/quantize_cuda.h"

namespace eqx_quant::cuda::fp8 {

// EQX_QUANT_CUDA_PDL=0 launches the main kernel without programmatic
// dependent launch (plain stream order).
inline bool UsePdl() {
  static const bool use = [] {
    const char* value = std::getenv("EQX_QUANT_CUDA_PDL");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return use;
}

// EQX_QUANT_CUDA_L2_HINTS=0 turns off the L2 eviction priorities of the
// cooperative current-scaling kernels (evict_normal everywhere; for
// measurements: results do not depend on it).
inline bool UseL2Hints() {
  static const bool use = [] {
    const char* value = std::getenv("EQX_QUANT_CUDA_L2_HINTS");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return use;
}

// Tiles of `tile_bytes` per block (of `grid`) that fit in about 60% of the L2
// (the rest for the outputs written meanwhile and other lines);
// EQX_QUANT_CUDA_L2_PERCENT=<0..100> sets another share (for measurements).
inline int64_t L2TilesPerBlock(int64_t grid, int64_t tile_bytes) {
  static const int64_t percent = [] {
    const char* value = std::getenv("EQX_QUANT_CUDA_L2_PERCENT");
    const int64_t parsed = value == nullptr ? 60 : std::atoll(value);
    return parsed < 0 ? int64_t{0} : (parsed > 100 ? int64_t{100} : parsed);
  }();
  if (!UseL2Hints() || grid <= 0) return 0;
  const int64_t l2_bytes = DeviceAttribute<cudaDevAttrL2CacheSize>(0);
  return l2_bytes * percent / 100 / (grid * tile_bytes);
}

inline LaunchStatus Failed(cudaError_t error, const char* what) {
  LaunchStatus status;
  status.ok = false;
  status.cuda_error = static_cast<int>(error);
  status.what = what;
  return status;
}

inline LaunchStatus Invalid(const char* what) {
  LaunchStatus status;
  status.ok = false;
  status.invalid_argument = true;
  status.what = what;
  return status;
}

// Launches `kernel` with programmatic dependent launch (UsePdl), or as a
// cooperative grid (`cooperative`: every block resident, grid-wide sync
// allowed; no PDL), in clusters of `cluster` blocks if > 1.
template <typename Params>
cudaError_t Launch(void (*kernel)(Params), dim3 grid, dim3 block,
                   size_t shared_bytes, cudaStream_t stream, int cluster,
                   const Params& params, bool cooperative = false) {
  if (shared_bytes > 48 * 1024) {
    const cudaError_t error = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(shared_bytes));
    if (error != cudaSuccess) return error;
  }
  cudaLaunchAttribute attributes[2];
  unsigned count = 0;
  if (cooperative) {
    attributes[count].id = cudaLaunchAttributeCooperative;
    attributes[count].val.cooperative = 1;
    ++count;
  } else if (UsePdl()) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  if (cluster > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = static_cast<unsigned>(cluster);
    attributes[count].val.clusterDim.y = 1;
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  cudaError_t error = cudaLaunchKernelEx(&config, kernel, params);
  if (error == cudaSuccess) error = cudaGetLastError();
  return error;
}

// Resident blocks per SM of `kernel` (at least 1).
template <typename Params>
int BlocksPerSm(void (*kernel)(Params), int threads, size_t shared_bytes) {
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocks, kernel, threads, shared_bytes) != cudaSuccess ||
      blocks <= 0) {
    cudaGetLastError();
    blocks = 1;
  }
  return blocks;
}

inline bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Elements of `type` in a 16-byte input vector (In::kVec on the host).
inline int VectorElements(InputType type) {
  return type == InputType::kF32 ? 4 : 8;
}

// fn(In{}, std::integral_constant<Fp8Format, kFormat>{}) for the problem's
// input type and FP8 format.
template <typename Fn>
LaunchStatus DispatchTypes(const Fp8QuantizeProblem& problem, Fn&& fn) {
  auto with_format = [&](auto input) -> LaunchStatus {
    switch (problem.format) {
      case Fp8Format::kE4M3Fn:
        return fn(input, std::integral_constant<Fp8Format, Fp8Format::kE4M3Fn>{});
      case Fp8Format::kE5M2:
        return fn(input, std::integral_constant<Fp8Format, Fp8Format::kE5M2>{});
    }
    return Invalid("unknown FP8 format");
  };
  switch (problem.input_type) {
    case InputType::kF32:
      return with_format(F32Input{});
    case InputType::kF16:
      return with_format(F16Input{});
    case InputType::kBF16:
      return with_format(Bf16Input{});
  }
  return Invalid("unknown input type");
}

// The launchers of the other translation units (fp8/quantize_cuda.cu runs the
// sequence). Each returns ok without launching when there is nothing to do.
// The walk: transposed output and/or dbias (fp8/walk_cuda.cu).
LaunchStatus LaunchWalk(const Fp8QuantizeProblem& problem,
                        const Fp8QuantizeBuffers& buffers, cudaStream_t stream,
                        int sms);
// The rowwise + transposed copies without dbias for aligned shapes
// (fp8/transpose_cuda.cu); TransposeApplies says when it can run.
bool TransposeApplies(const Fp8QuantizeProblem& problem,
                      const Fp8QuantizeBuffers& buffers);
// dbias over one reduced axis cut into equal chunks of rows (dbias_split
// divides it, one kept row): the dbias node sums and the amax can come from
// one pass over x (fp8/quantize_cuda.cu's column tree sums).
bool TreeSumsFit(const Fp8QuantizeProblem& problem);
// TreeSumsFit with current scaling and an FP8 output: that pass comes first,
// then the cast (or DbiasCurrentCastKernel does both).
bool TreeSumsApply(const Fp8QuantizeProblem& problem);
LaunchStatus LaunchTranspose(const Fp8QuantizeProblem& problem,
                             const Fp8QuantizeBuffers& buffers,
                             cudaStream_t stream, int sms);
// Current scaling of one example with the transposed copy: the amax pass and
// the cast + transpose in one cooperative launch (fp8/transpose_cuda.cu, or
// for larger inputs the ring kernel below); CurrentTransposeApplies says when
// it can run.
bool CurrentTransposeApplies(const Fp8QuantizeProblem& problem,
                             const Fp8QuantizeBuffers& buffers);
LaunchStatus LaunchCurrentTranspose(const Fp8QuantizeProblem& problem,
                                    const Fp8QuantizeBuffers& buffers,
                                    cudaStream_t stream, int sms);
// Current scaling of a rowwise-only example in one cooperative launch
// (fp8/current_cuda.cu); CurrentCastApplies says when it can run.
bool CurrentCastApplies(const Fp8QuantizeProblem& problem,
                        const Fp8QuantizeBuffers& buffers);
LaunchStatus LaunchCurrentCast(const Fp8QuantizeProblem& problem,
                               const Fp8QuantizeBuffers& buffers,
                               cudaStream_t stream, int sms);
// dbias + current scaling of one example (rowwise and/or transposed) in one
// cooperative launch (fp8/dbias_current_cuda.cu), dbias node 0 finished
// included; DbiasCurrentCastApplies says when it can run.
bool DbiasCurrentCastApplies(const Fp8QuantizeProblem& problem,
                             const Fp8QuantizeBuffers& buffers);
LaunchStatus LaunchDbiasCurrentCast(const Fp8QuantizeProblem& problem,
                                    const Fp8QuantizeBuffers& buffers,
                                    cudaStream_t stream, int sms);
// A CurrentTransposeApplies problem with rows a multiple of 128 and at least
// two 128-row sub-tiles per SM: the same kernel without the sums
// (fp8/dbias_current_cuda.cu), which LaunchCurrentTranspose chooses where
// RingCurrentTransposeTakes says so.
bool RingCurrentTransposeTakes(const Fp8QuantizeProblem& problem, int sms);
LaunchStatus LaunchRingCurrentTranspose(const Fp8QuantizeProblem& problem,
                                        const Fp8QuantizeBuffers& buffers,
                                        cudaStream_t stream, int sms);

}  // namespace eqx_quant::cuda::fp8

#endif  // EQX_QUANT_CSRC_FP8_LAUNCH_CUDA_H_
