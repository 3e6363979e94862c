// CUDA kernel of eqx_quant_fp8_block_quantize (sm_90a): FP8 with one float32
// scale per 1x128 block or 128x128 tile, bit for bit the CPU kernel's bytes
// (fp8_block/quantize_cpu.cc).
//
// TileKernel: one CTA per 128x128 tile (tiles of an example row-major, then
// the examples), each quantized by fp8_block/tile_cuda.cuh's QuantizeTile
// (the float semantics and the thread layout are described there). The tile
// index is below 2^31 (checked), so it is split with 32-bit magic divisions.
// The aligned kernels fit in 64 registers (4 CTAs of 256 or 2 of 512 threads
// per SM); no kernel spills.

#include <cuda_runtime.h>

#include <cstdint>

#include "common/fp8_block_problem.h"
#include "common/fp8_format.h"
#include "common/magic_division.h"
#include "fp8_block/quantize_cuda.h"
#include "fp8_block/tile_cuda.cuh"
#include "mxfp8/device_cuda.cuh"

namespace eqx_quant::cuda {
namespace {

using fp8_block_tile::Layout;
using fp8_block_tile::MinBlocks;
using fp8_block_tile::QuantizeTile;
using fp8_block_tile::TileParams;
using fp8_block_tile::TilePlace;
using mxfp8::Bf16In;
using mxfp8::F16In;
using mxfp8::F32In;

constexpr int kB = static_cast<int>(kFp8Block);

struct Params {
  TileParams tile;
  int64_t rows;       // R
  uint32_t rb_count;  // ceil(R / 128)
  MagicDivisor rb_div;
  MagicDivisor cb_div;
  int col_store;  // the same for every example: R and 16-byte examples
};

template <typename In, Fp8Format kFormat, bool kRow, bool kCol, bool kAligned>
__global__ void __launch_bounds__(Layout<In>::kThreads, (MinBlocks<In, kAligned>()))
    TileKernel(const __grid_constant__ Params p) {
  // Tile t = (b * rb_count + rb) * cb_count + cb.
  const uint32_t t = blockIdx.x;
  const uint32_t line = MagicQuotient(t, p.cb_div);  // b * rb_count + rb
  const uint32_t cb = t - line * p.tile.cb_count;
  const uint32_t b = MagicQuotient(line, p.rb_div);
  const uint32_t rb = line - b * p.rb_count;
  const int64_t r0 = int64_t{rb} * kB;
  TilePlace at;
  at.row0 = int64_t{b} * p.rows + r0;  // in the (batch * R, C) view
  at.c0 = int64_t{cb} * kB;
  at.cb = cb;
  at.tile_rows = static_cast<int>(min(int64_t{kB}, p.rows - r0));
  at.tile_cols = static_cast<int>(min(int64_t{kB}, p.tile.cols - at.c0));
  at.col_base = kCol ? p.tile.col + int64_t{b} * p.rows * p.tile.cols : nullptr;
  at.col_rows = p.rows;
  at.col_r0 = r0;
  at.col_store = p.col_store;
  at.row_scale_2d = int64_t{line} * p.tile.cb_count + cb;
  at.col_scale_2d = (int64_t{b} * p.tile.cb_count + cb) * p.rb_count + rb;
  at.col_scale_1d = (int64_t{b} * p.tile.cols + at.c0) * p.rb_count + rb;
  at.col_scale_stride = p.rb_count;
  QuantizeTile<In, kFormat, kRow, kCol, kAligned>(p.tile, at);
}

// ---------------------------------------------------------------------------
// Host side.

template <typename In, Fp8Format kFormat, bool kRow, bool kCol>
Fp8BlockLaunchStatus LaunchTiles(const Params& p, const Fp8BlockQuantizeBuffers& buf,
                                 uint32_t tiles, cudaStream_t stream) {
  constexpr int kVec = In::kVec;
  const bool aligned = fp8_block_tile::Aligned(buf.x, 16) && p.tile.cols % kVec == 0 &&
                       (!kRow || fp8_block_tile::Aligned(buf.row, kVec));
  auto* kernel = aligned ? &TileKernel<In, kFormat, kRow, kCol, true>
                         : &TileKernel<In, kFormat, kRow, kCol, false>;
  kernel<<<tiles, Layout<In>::kThreads, 0, stream>>>(p);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return {false, static_cast<int>(error), "tile kernel launch"};
  return {};
}

template <typename In, Fp8Format kFormat>
Fp8BlockLaunchStatus LaunchFormat(const Params& p, const Fp8BlockQuantizeBuffers& buf,
                                  bool rowwise, bool colwise, uint32_t tiles,
                                  cudaStream_t stream) {
  if (rowwise && colwise) return LaunchTiles<In, kFormat, true, true>(p, buf, tiles, stream);
  if (rowwise) return LaunchTiles<In, kFormat, true, false>(p, buf, tiles, stream);
  return LaunchTiles<In, kFormat, false, true>(p, buf, tiles, stream);
}

template <typename In>
Fp8BlockLaunchStatus LaunchInput(const Fp8BlockQuantizeProblem& problem, const Params& p,
                                 const Fp8BlockQuantizeBuffers& buf, uint32_t tiles,
                                 cudaStream_t stream) {
  if (problem.format == Fp8Format::kE4M3Fn) {
    return LaunchFormat<In, Fp8Format::kE4M3Fn>(p, buf, problem.rowwise, problem.colwise,
                                                tiles, stream);
  }
  return LaunchFormat<In, Fp8Format::kE5M2>(p, buf, problem.rowwise, problem.colwise, tiles,
                                            stream);
}

}  // namespace

Fp8BlockLaunchStatus Fp8BlockQuantize(const Fp8BlockQuantizeProblem& problem,
                                      const Fp8BlockQuantizeBuffers& buffers,
                                      CUstream_st* stream) {
  if (problem.batch == 0 || problem.rows == 0 || problem.cols == 0) return {};
  if (!problem.rowwise && !problem.colwise) return {};
  const int64_t rb_count = Fp8Blocks(problem.rows);
  const int64_t cb_count = Fp8Blocks(problem.cols);
  const int64_t tiles = problem.batch * rb_count * cb_count;
  if (tiles > 0x7FFFFFFF) return {false, 0, "more than 2^31 - 1 tiles"};
  Params p{};
  p.tile = fp8_block_tile::MakeTileParams(problem, problem.cols, buffers);
  p.rows = problem.rows;
  p.rb_count = static_cast<uint32_t>(rb_count);
  p.rb_div = MakeMagicDivisor(p.rb_count);
  p.cb_div = MakeMagicDivisor(p.tile.cb_count);
  p.col_store = problem.colwise ? fp8_block_tile::ColStoreBytes(problem.rows, buffers.col) : 1;
  const auto count = static_cast<uint32_t>(tiles);
  switch (problem.input_type) {
    case InputType::kF32:
      return LaunchInput<F32In>(problem, p, buffers, count, stream);
    case InputType::kF16:
      return LaunchInput<F16In>(problem, p, buffers, count, stream);
    case InputType::kBF16:
      return LaunchInput<Bf16In>(problem, p, buffers, count, stream);
  }
  return {false, 0, "unknown input type"};
}

}  // namespace eqx_quant::cuda
