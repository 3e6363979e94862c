// Two launches: one thread writes every group's first row and scale-region
// offset (the prefix sums of common/grouped_layout.h) into scratch, then one
// thread per 32-element block decodes it (consecutive threads on consecutive
// blocks of a row: coalesced 32-byte reads and 64-byte writes).

#include <cuda_runtime.h>

#include <cstdint>

#include "common/fp8_format.h"
#include "common/grouped_layout.h"
#include "common/mx_decode.h"
#include "grouped/dequantize_cuda.h"

namespace eqx_quant::cuda {
namespace {

using grouped::CeilDiv;
using grouped::GroupStarts;
using grouped::kMxfp8Block;
using grouped::kTileCols;
using grouped::PadTo;
using grouped::ScalePart;
using grouped::ScaleRegionOffsets;
using grouped::SwizzleOffset;

constexpr int kThreads = 256;

__global__ void GroupLayout(GroupedMxfp8DequantizeProblem p) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int64_t* starts = p.layout;
  int64_t* offsets = p.layout + p.groups + 1;
  GroupStarts(p.sizes, p.groups, p.rows_per_unit, p.rows, starts);
  ScaleRegionOffsets(ScalePart::kRowwise, starts, p.groups, p.cols, kMxfp8Block, offsets);
}

template <typename Format>
__global__ void __launch_bounds__(kThreads) DecodeBlocks(GroupedMxfp8DequantizeProblem p) {
  const int64_t blocks_per_row = CeilDiv(p.cols, kMxfp8Block);
  const int64_t index = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (index >= p.rows * blocks_per_row) return;
  const int64_t r = index / blocks_per_row;
  const int64_t j = index % blocks_per_row;
  const int64_t* starts = p.layout;
  const int64_t* offsets = p.layout + p.groups + 1;
  const int64_t c0 = j * kMxfp8Block;
  const int64_t count = p.cols - c0 < kMxfp8Block ? p.cols - c0 : kMxfp8Block;
  uint16_t* out = p.out + r * p.cols + c0;
  if (r >= starts[p.groups]) {
    for (int64_t t = 0; t < count; ++t) out[t] = 0;
    return;
  }
  // The last group starting at or before r (empty groups share its start).
  int64_t lo = 0, hi = p.groups - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (starts[mid] <= r) lo = mid; else hi = mid - 1;
  }
  const int64_t g = lo;
  const int64_t padded_cols = PadTo(blocks_per_row, kTileCols);
  const int64_t at = offsets[g] + SwizzleOffset(r - starts[g], j, padded_cols);
  const float scale = E8m0Value(p.scales[at]);
  const uint8_t* src = p.data + r * p.cols + c0;
  for (int64_t t = 0; t < count; ++t) {
    out[t] = ToBf16Bits(Fp8Value<Format>(src[t]) * scale);
  }
}

}  // namespace

GroupedDequantizeStatus GroupedMxfp8DequantizeBf16(const GroupedMxfp8DequantizeProblem& p,
                                                   CUstream_st* stream) {
  if (p.rows == 0 || p.cols == 0) return {};
  GroupLayout<<<1, 32, 0, stream>>>(p);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return {false, static_cast<int>(error), "group layout launch"};
  const int64_t blocks = p.rows * CeilDiv(p.cols, kMxfp8Block);
  const int64_t ctas = CeilDiv(blocks, kThreads);
  if (ctas > 0x7FFFFFFF) return {false, 0, "more than 2^31 - 1 CTAs"};
  if (p.format == Fp8Format::kE4M3Fn) {
    DecodeBlocks<E4M3Fn><<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(p);
  } else {
    DecodeBlocks<E5M2><<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(p);
  }
  error = cudaGetLastError();
  if (error != cudaSuccess) return {false, static_cast<int>(error), "decode launch"};
  return {};
}

}  // namespace eqx_quant::cuda
