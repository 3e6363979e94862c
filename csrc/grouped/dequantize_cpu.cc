// The groups' first rows and region offsets are computed once per call
// (common/grouped_layout.h); a task finds the group of its first row by
// binary search and then walks forward.

#include "grouped/dequantize_cpu.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/fp8_format.h"
#include "common/grouped_layout.h"
#include "common/mx_decode.h"

namespace eqx_quant::cpu {
namespace {

using grouped::kMxfp8Block;

// Elements below which a task is not worth a thread.
constexpr int64_t kMinTaskElements = int64_t{1} << 16;

template <typename Format>
void DecodeRows(const GroupedMxfp8DequantizeProblem& p, const std::vector<int64_t>& starts,
                const std::vector<int64_t>& offsets, int64_t begin, int64_t end) {
  float payload[256];
  for (uint32_t byte = 0; byte < 256; ++byte) payload[byte] = Fp8Value<Format>(byte);
  const int64_t blocks = grouped::CeilDiv(p.cols, kMxfp8Block);
  const int64_t padded_cols = grouped::PadTo(blocks, grouped::kTileCols);
  const int64_t grouped_end = starts[p.groups];
  // The last group whose start is <= begin (empty groups share the next one's start).
  int64_t g = std::upper_bound(starts.begin(), starts.begin() + p.groups, begin) -
              starts.begin() - 1;
  for (int64_t r = begin; r < end; ++r) {
    uint16_t* out = p.out + r * p.cols;
    if (r >= grouped_end) {
      std::memset(out, 0, static_cast<size_t>(p.cols) * sizeof(uint16_t));
      continue;
    }
    while (starts[g + 1] <= r) ++g;
    const int64_t i = r - starts[g];
    const uint8_t* data = p.data + r * p.cols;
    const uint8_t* region = p.scales + offsets[g];
    for (int64_t k = 0; k < blocks; ++k) {
      const float scale = E8m0Value(region[grouped::SwizzleOffset(i, k, padded_cols)]);
      const int64_t stop = std::min(p.cols, (k + 1) * kMxfp8Block);
      for (int64_t c = k * kMxfp8Block; c < stop; ++c) {
        out[c] = ToBf16Bits(payload[data[c]] * scale);
      }
    }
  }
}

}  // namespace

void GroupedMxfp8DequantizeBf16(const GroupedMxfp8DequantizeProblem& p,
                                const ParallelFor& parallel) {
  if (p.rows == 0 || p.cols == 0) return;
  std::vector<int64_t> starts(static_cast<size_t>(p.groups + 1));
  std::vector<int64_t> offsets(static_cast<size_t>(p.groups + 1));
  grouped::GroupStarts(p.sizes, p.groups, p.rows_per_unit, p.rows, starts.data());
  grouped::ScaleRegionOffsets(grouped::ScalePart::kRowwise, starts.data(), p.groups, p.cols,
                              kMxfp8Block, offsets.data());
  const int64_t min_rows = std::max<int64_t>(1, kMinTaskElements / p.cols);
  ParallelRanges(parallel, p.rows, min_rows, 1, [&](int64_t begin, int64_t end) {
    if (p.format == Fp8Format::kE4M3Fn) {
      DecodeRows<E4M3Fn>(p, starts, offsets, begin, end);
    } else {
      DecodeRows<E5M2>(p, starts, offsets, begin, end);
    }
  });
}

}  // namespace eqx_quant::cpu
