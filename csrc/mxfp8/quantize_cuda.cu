// CUDA kernels of eqx_quant_mxfp8_quantize for sm_90a (H100 / H200).
//
// Semantics: exactly the CPU kernel's (mxfp8/quantize_cpu.h), bit for
// bit. Per block of 32 (a final partial block as if zero-padded):
//   amax  = NaN-ignoring max |x|, found as the max of the magnitude bit
//           patterns with NaN -> 0 (integer compares: no flush-to-zero issue)
//   E     = Mxfp8BlockScale(amax) = e8m0_round_up(fl(amax * fl(1/fp8_max)))
//           (the round-up by E8m0RoundUpNonNegative: amax is never NaN here)
//   bytes = cvt.rn.satfinite(fl(x * 2^(127-E)))    NaN -> 0x7F
// The helpers of common/e8m0.h are shared with the CPU kernel. This file is
// compiled with --fmad=false --ftz=false, and the per-element product is an
// explicit __fmul_rn, so a subnormal product (E near 0xFE) is kept. The FP8
// cast is the hardware convert `cvt.rn.satfinite.{e4m3,e5m2}x2.f32`, which
// equals fp8_format.h's FloatToFp8 on all 2^32 f32 inputs, NaN -> 0x7F in
// both formats (EqxQuantCudaFp8ConvertSelfTest in
// cuda/fp8_convert_self_test.cu).
//
// Kernels (256 threads; nothing allocated):
//   * RowStreamKernel, rowwise only when every row is a whole number of
//     blocks (L % 32 == 0; aligned buffers): the data as one flat stream of
//     16-byte vectors, a block being 32/kVec consecutive lanes (amax by a
//     shuffle butterfly). One chunk of 4 vectors per thread per CTA, all
//     loads issued first, FP8 bytes written with streaming stores, and so are
//     a warp's scale bytes (staged in shared memory: one whole sector).
//   * TileKernel (mxfp8/tile_cuda.cuh) for colwise (and rowwise + colwise)
//     outputs, and rowwise only with the dbias' 32-row sums: 32-row tiles
//     through shared memory, one CTA per tile or 512-column strip.
//   * RowScalarKernel / ColScalarKernel (mxfp8/scalar_cuda.cuh): one thread
//     per block, scalar loads, for every other shape or alignment (L % 32 !=
//     0, rows not a multiple of 16 input bytes, misaligned buffers). The
//     column kernel is coalesced (consecutive threads, consecutive columns).
// No kernel spills (ptxas -warn-spills is on in CMake).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/fp8_format.h"
#include "common/mxfp8_problem.h"
#include "mxfp8/device_cuda.cuh"
#include "mxfp8/quantize_cuda.h"
#include "mxfp8/row_stream_cuda.cuh"
#include "mxfp8/scalar_cuda.cuh"
#include "mxfp8/tile_cuda.cuh"

namespace eqx_quant::cuda {
namespace {

using mxfp8::Bf16In;
using mxfp8::F16In;
using mxfp8::F32In;
using mxfp8_row::kRowStreamThreads;
using mxfp8_row::kRowStreamUnroll;
using mxfp8_row::RowStreamKernel;
using mxfp8_row::RowStreamParams;
using mxfp8_scalar::ColScalarKernel;
using mxfp8_scalar::kScalarThreads;
using mxfp8_scalar::RowScalarKernel;
using mxfp8_scalar::ScalarParams;
using mxfp8_tile::kBlock;
using mxfp8_tile::kRowSumFloats;
using mxfp8_tile::kStripCols;
using mxfp8_tile::kThreads;
using mxfp8_tile::TileKernel;
using mxfp8_tile::TileParams;

// ---------------------------------------------------------------------------
// Host side.

bool Aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

Mxfp8LaunchStatus Check(const char* what) {
  Mxfp8LaunchStatus status;
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    status.ok = false;
    status.cuda_error = static_cast<int>(error);
    status.what = what;
  }
  return status;
}

unsigned GridFor(int64_t work_items) {
  const int64_t kMaxGrid = int64_t{1} << 30;  // grid-stride beyond
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min(work_items, kMaxGrid)));
}

template <typename In, Fp8Format kFormat, bool kRow, bool kCol, bool kSums,
          bool kWhole>
Mxfp8LaunchStatus LaunchTileKernel(const TileParams& p, cudaStream_t stream) {
  // One CTA per strip (else per tile), prefetching inside the strip: short
  // CTAs stream faster than a persistent wave
  // (benchmarks/probes/stream_cast.cu).
  // The kernel reads through shared memory only: prefer it to L1.
  auto* const kernel = &TileKernel<In, kFormat, kRow, kCol, kSums, kWhole>;
  static const bool carveout_set = [kernel] {
    const bool ok =
        cudaFuncSetAttribute(kernel,
                             cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared) == cudaSuccess;
    if (!ok) cudaGetLastError();  // a preference only
    return ok;
  }();
  (void)carveout_set;
  // The rowwise-only sums' buffers (with the static ones above 48 KiB).
  constexpr int kDynamicBytes =
      kRowSumFloats<In, kCol, kSums> * static_cast<int>(sizeof(float));
  if constexpr (kDynamicBytes > 0) {
    static const cudaError_t raised = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kDynamicBytes);
    if (raised != cudaSuccess) {
      return Mxfp8LaunchStatus{false, static_cast<int>(raised),
                               "raising the shared memory of TileKernel"};
    }
  }
  const int64_t strip_tiles = kStripCols / (32 * In::kVec);
  kernel<<<GridFor(p.strips ? p.tiles / strip_tiles : p.tiles), kThreads,
           kDynamicBytes, stream>>>(p);
  return Check("launching TileKernel");
}

// kWhole (strips, 16-byte rows, K % 32 == 0: no bounds) or the general kernel.
template <typename In, Fp8Format kFormat, bool kRow, bool kCol,
          bool kSums = false>
Mxfp8LaunchStatus LaunchTile(const TileParams& p, cudaStream_t stream) {
  if (p.tiles > int64_t{0x7FFFFFFF}) {
    return Mxfp8LaunchStatus{false, 0, "the tensor is too large (2^31 tiles)"};
  }
  if (p.strips && p.wide && p.rows % kBlock == 0) {
    return LaunchTileKernel<In, kFormat, kRow, kCol, kSums, true>(p, stream);
  }
  return LaunchTileKernel<In, kFormat, kRow, kCol, kSums, false>(p, stream);
}

template <typename In, Fp8Format kFormat>
Mxfp8LaunchStatus LaunchRowStream(const Mxfp8QuantizeBuffers& buffers,
                                  int64_t elements, cudaStream_t stream) {
  RowStreamParams p{};
  p.x = buffers.x;
  p.row = buffers.row;
  p.row_scale = buffers.row_scale;
  p.vectors = elements / In::kVec;
  p.words = Aligned(buffers.row_scale, 4);
  const int64_t chunk = int64_t{kRowStreamThreads} * kRowStreamUnroll;
  const int64_t chunks = (p.vectors + chunk - 1) / chunk;
  if (chunks > int64_t{0x7FFFFFFF}) {
    return Mxfp8LaunchStatus{false, 0, "the tensor is too large (2^31 chunks)"};
  }
  RowStreamKernel<In, kFormat>
      <<<static_cast<unsigned>(chunks), kRowStreamThreads, 0, stream>>>(p);
  return Check("launching RowStreamKernel");
}

template <typename In, Fp8Format kFormat>
Mxfp8LaunchStatus LaunchRowScalar(const Mxfp8QuantizeProblem& problem,
                                  const Mxfp8QuantizeBuffers& buffers,
                                  cudaStream_t stream) {
  ScalarParams p{};
  p.x = buffers.x;
  p.out = buffers.row;
  p.scale = buffers.row_scale;
  p.length = problem.last;
  p.blocks = Mxfp8Blocks(problem.last);
  p.total = problem.outer * problem.blocked * problem.inner * p.blocks;
  RowScalarKernel<In, kFormat>
      <<<GridFor((p.total + kScalarThreads - 1) / kScalarThreads),
         kScalarThreads, 0, stream>>>(p);
  return Check("launching RowScalarKernel");
}

template <typename In, Fp8Format kFormat>
Mxfp8LaunchStatus LaunchColScalar(const Mxfp8QuantizeProblem& problem,
                                  const Mxfp8QuantizeBuffers& buffers,
                                  cudaStream_t stream) {
  ScalarParams p{};
  p.x = buffers.x;
  p.out = buffers.col;
  p.scale = buffers.col_scale;
  p.length = problem.blocked;
  p.width = problem.inner * problem.last;
  p.blocks = Mxfp8Blocks(problem.blocked);
  p.total = problem.outer * p.blocks * p.width;
  ColScalarKernel<In, kFormat>
      <<<GridFor((p.total + kScalarThreads - 1) / kScalarThreads),
         kScalarThreads, 0, stream>>>(p);
  return Check("launching ColScalarKernel");
}

// Whether the rowwise-only tile kernel with the 32-row sums takes `problem`
// (kVec: elements per 16 bytes of x).
bool RowTileSumsTake(const Mxfp8QuantizeProblem& problem,
                     const Mxfp8QuantizeBuffers& buffers, int kVec) {
  return problem.rowwise && !problem.colwise && problem.blocked > 0 &&
         problem.blocked % kBlock == 0 && problem.last % kBlock == 0 &&
         Aligned(buffers.x, 16) && Aligned(buffers.row, kVec);
}

// The tile kernel's parameters for `problem` (sums unset). row_in_tile: the
// rowwise bytes are written by the tile kernel.
TileParams TileParamsFor(const Mxfp8QuantizeProblem& problem,
                         const Mxfp8QuantizeBuffers& buffers,
                         int64_t tile_cols, bool row_in_tile) {
  TileParams p{};
  p.x = buffers.x;
  p.row = buffers.row;
  p.row_scale = buffers.row_scale;
  p.col = buffers.col;
  p.col_scale = buffers.col_scale;
  p.rows = problem.blocked;
  p.width = problem.inner * problem.last;
  const int64_t k_tiles = Mxfp8Blocks(problem.blocked);
  const int64_t w_tiles = (p.width + tile_cols - 1) / tile_cols;
  p.tiles = problem.outer * k_tiles * w_tiles;
  p.k_tiles = static_cast<uint32_t>(std::min<int64_t>(k_tiles, 0x7FFFFFFF));
  p.w_tiles = static_cast<uint32_t>(std::min<int64_t>(w_tiles, 0x7FFFFFFF));
  p.wide = p.width % 16 == 0 &&
           (!problem.colwise || Aligned(buffers.col, 16)) &&
           (!row_in_tile || Aligned(buffers.row, 16));
  p.strips = p.width % kStripCols == 0 &&
             (!problem.colwise || Aligned(buffers.col_scale, 16)) &&
             (!row_in_tile || Aligned(buffers.row_scale, 16));
  return p;
}

template <typename In, Fp8Format kFormat>
Mxfp8LaunchStatus Run(const Mxfp8QuantizeProblem& problem,
                      const Mxfp8QuantizeBuffers& buffers, float* tile_sums,
                      cudaStream_t stream) {
  constexpr int kVec = In::kVec;
  constexpr int64_t kTileCols = 32 * kVec;
  const int64_t width = problem.inner * problem.last;  // W
  const int64_t elements = problem.outer * problem.blocked * width;
  const bool x_ok = Aligned(buffers.x, 16);
  const bool row_in_tile = problem.rowwise && problem.last % kBlock == 0 &&
                           Aligned(buffers.row, kVec);

  if (!problem.colwise) {
    if (tile_sums != nullptr && RowTileSumsTake(problem, buffers, kVec)) {
      TileParams p = TileParamsFor(problem, buffers, kTileCols, true);
      p.sums = tile_sums;
      Mxfp8LaunchStatus status =
          LaunchTile<In, kFormat, true, false, true>(p, stream);
      status.tile_sums_written = status.ok;
      return status;
    }
    if (!x_ok || !row_in_tile) {
      return LaunchRowScalar<In, kFormat>(problem, buffers, stream);
    }
    return LaunchRowStream<In, kFormat>(buffers, elements, stream);
  }

  if (!x_ok || width % kVec != 0 || !Aligned(buffers.col, kVec)) {
    Mxfp8LaunchStatus status =
        LaunchColScalar<In, kFormat>(problem, buffers, stream);
    if (status.ok && problem.rowwise) {
      status = LaunchRowScalar<In, kFormat>(problem, buffers, stream);
    }
    return status;
  }
  TileParams p = TileParamsFor(problem, buffers, kTileCols, row_in_tile);
  if (row_in_tile && tile_sums != nullptr && problem.blocked % kBlock == 0) {
    p.sums = tile_sums;
    Mxfp8LaunchStatus status = LaunchTile<In, kFormat, true, true, true>(p, stream);
    status.tile_sums_written = status.ok;
    return status;
  }
  if (row_in_tile) return LaunchTile<In, kFormat, true, true>(p, stream);
  Mxfp8LaunchStatus status = LaunchTile<In, kFormat, false, true>(p, stream);
  if (status.ok && problem.rowwise) {
    status = LaunchRowScalar<In, kFormat>(problem, buffers, stream);
  }
  return status;
}

template <typename In>
Mxfp8LaunchStatus DispatchFormat(const Mxfp8QuantizeProblem& problem,
                                 const Mxfp8QuantizeBuffers& buffers,
                                 float* tile_sums, cudaStream_t stream) {
  if (problem.format == Fp8Format::kE4M3Fn) {
    return Run<In, Fp8Format::kE4M3Fn>(problem, buffers, tile_sums, stream);
  }
  return Run<In, Fp8Format::kE5M2>(problem, buffers, tile_sums, stream);
}

}  // namespace

bool Mxfp8RowTileSumsTake(const Mxfp8QuantizeProblem& problem,
                          const Mxfp8QuantizeBuffers& buffers) {
  const int vec = problem.input_type == InputType::kF32 ? F32In::kVec
                                                        : Bf16In::kVec;
  return RowTileSumsTake(problem, buffers, vec);
}

Mxfp8LaunchStatus Mxfp8Quantize(const Mxfp8QuantizeProblem& problem,
                                const Mxfp8QuantizeBuffers& buffers,
                                CUstream_st* stream, float* tile_sums) {
  const int64_t elements =
      problem.outer * problem.blocked * problem.inner * problem.last;
  if (elements == 0) return Mxfp8LaunchStatus{};  // every output is empty
  switch (problem.input_type) {
    case InputType::kF32:
      return DispatchFormat<F32In>(problem, buffers, tile_sums, stream);
    case InputType::kF16:
      return DispatchFormat<F16In>(problem, buffers, tile_sums, stream);
    case InputType::kBF16:
      return DispatchFormat<Bf16In>(problem, buffers, tile_sums, stream);
  }
  return Mxfp8LaunchStatus{false, 0, "unknown input type"};
}

}  // namespace eqx_quant::cuda
