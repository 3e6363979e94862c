// The groups' first rows and region offsets, and the decode tables, are
// computed once per call (common/grouped_layout.h,
// mxfp8/dequantize_block_cpu.h, whose block decode the dense kernel shares);
// a task finds the group of its first row by binary search and then walks
// forward.

#include "grouped/dequantize_cpu.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/grouped_layout.h"
#include "mxfp8/dequantize_block_cpu.h"

namespace eqx_quant::cpu {
namespace {

using grouped::kMxfp8Block;

// Elements below which a task is not worth a thread.
constexpr int64_t kMinTaskElements = int64_t{1} << 16;

void DecodeRows(const GroupedMxfp8DequantizeProblem& p, const Mxfp8DecodeTables& t,
                const std::vector<int64_t>& starts, const std::vector<int64_t>& offsets,
                int64_t begin, int64_t end) {
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
      const int64_t first = k * kMxfp8Block;
      DecodeMxfp8BlockBf16(data + first, std::min(p.cols, first + kMxfp8Block) - first,
                           region[grouped::SwizzleOffset(i, k, padded_cols)], t, out + first);
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
  Mxfp8DecodeTables tables;
  FillMxfp8DecodeTables(p.format, tables);
  ParallelRanges(parallel, p.rows, min_rows, 1, [&](int64_t begin, int64_t end) {
    DecodeRows(p, tables, starts, offsets, begin, end);
  });
}

}  // namespace eqx_quant::cpu
