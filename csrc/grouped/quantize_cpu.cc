#include "grouped/quantize_cpu.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/cpu_input.h"
#include "common/float_narrow.h"
#include "common/fp8_quantize_problem.h"
#include "common/grouped_layout.h"
#include "common/grouped_problem.h"
#include "common/mxfp8_problem.h"
#include "common/nvfp4_problem.h"
#include "common/parallel_for.h"
#include "common/tree_sum.h"
#include "fp8/quantize_cpu.h"
#include "mxfp8/quantize_cpu.h"
#include "nvfp4/quantize_cpu.h"

namespace eqx_quant::cpu {
namespace {

using grouped::ScalePart;
using grouped::ScaleRegion;

// Zeroes the elements index .. index + count - 1 of a packed F4E2M1FN buffer
// (element e is nibble e % 2, 0 = low, of base[e / 2]); a byte shared with an
// element outside the run keeps that element's nibble.
void ZeroPackedRun(uint8_t* base, int64_t index, int64_t count) {
  if (count <= 0) return;
  if (index % 2 != 0) {  // the run starts in a high nibble
    base[index / 2] &= 0x0Fu;
    ++index;
    --count;
  }
  std::memset(base + index / 2, 0, static_cast<size_t>(count / 2));
  if (count % 2 != 0) base[(index + count) / 2] &= 0xF0u;  // a low nibble
}

// The rows of one example and their groups.
class ExampleGroups {
 public:
  explicit ExampleGroups(const GroupedView& view) : view_(view) {
    starts_.resize(static_cast<size_t>(view.groups + 1));
  }

  // Computes the group starts of example b from its group sizes.
  void Load(const int32_t* group_sizes) {
    grouped::GroupStarts(group_sizes, view_.groups, view_.rows_per_unit,
                         view_.rows, starts_.data());
  }

  int64_t start(int64_t g) const { return starts_[g]; }
  int64_t rows(int64_t g) const { return starts_[g + 1] - starts_[g]; }
  // The first row that belongs to no group.
  int64_t end() const { return starts_[view_.groups]; }
  const int64_t* starts() const { return starts_.data(); }

  // Zeroes the rows that belong to no group in an R x N (or flat R*N, groups
  // laid out one after another) output of one byte per element.
  void ZeroTail(uint8_t* data) const {
    const int64_t first = end() * view_.cols;
    const int64_t count = view_.elements() - first;
    if (count > 0) std::memset(data + first, 0, static_cast<size_t>(count));
  }

  // The same for packed E2M1 codes: the example's elements are example_first
  // .. of the F4E2M1FN buffer at `base`.
  void ZeroPackedTail(uint8_t* base, int64_t example_first) const {
    const int64_t first = end() * view_.cols;
    ZeroPackedRun(base, example_first + first, view_.elements() - first);
  }

 private:
  const GroupedView& view_;
  std::vector<int64_t> starts_;
};

// The swizzled scale buffer of one part of one example.
class ScaleRegions {
 public:
  ScaleRegions(ScalePart part, int64_t groups, int64_t cols, int64_t block,
               int64_t bytes)
      : part_(part), cols_(cols), block_(block), bytes_(bytes) {
    offsets_.resize(static_cast<size_t>(groups + 1));
  }

  // Zero-fills `buffer` (bytes_ long) and computes the region offsets of the
  // example's groups.
  void Start(const ExampleGroups& groups, int64_t num_groups,
             uint8_t* buffer) {
    buffer_ = buffer;
    if (bytes_ > 0) std::memset(buffer_, 0, static_cast<size_t>(bytes_));
    grouped::ScaleRegionOffsets(part_, groups.starts(), num_groups, cols_,
                                block_, offsets_.data());
  }

  // Stores group g's T_g (from `src`, see grouped::ScatterToRegion).
  void Store(int64_t g, int64_t group_rows, const uint8_t* src,
             int64_t t_stride, bool transposed) const {
    const ScaleRegion region =
        grouped::GroupScaleRegion(part_, group_rows, cols_, block_);
    // Never past the buffer (the worst-case length makes this always hold).
    if (offsets_[g] + region.bytes() > bytes_) return;
    grouped::ScatterToRegion(src, t_stride, transposed, region,
                             buffer_ + offsets_[g]);
  }

 private:
  ScalePart part_;
  int64_t cols_;
  int64_t block_;
  int64_t bytes_;
  uint8_t* buffer_ = nullptr;
  std::vector<int64_t> offsets_;
};

// ---------------------------------------------------------------------------
// FP8 (tensor scaling)

void QuantizeFp8(const GroupedFp8QuantizeProblem& problem,
                 const GroupedFp8QuantizeBuffers& buffers,
                 const ParallelFor& parallel) {
  const GroupedView& view = problem.view;
  const int64_t elements = view.elements();
  const int64_t x_bytes = InputTypeBytes(view.input_type);
  ExampleGroups groups(view);

  Fp8QuantizeProblem dense;
  dense.input_type = view.input_type;
  dense.format = problem.format;
  dense.batch = 1;
  dense.cols = view.cols;
  dense.rowwise = problem.rowwise;
  dense.colwise = problem.colwise;
  dense.with_dbias = false;

  for (int64_t b = 0; b < view.batch; ++b) {
    const auto* x = static_cast<const uint8_t*>(buffers.x) +
                    b * elements * x_bytes;
    uint8_t* row = problem.rowwise ? buffers.row + b * elements : nullptr;
    uint8_t* col = problem.colwise ? buffers.col + b * elements : nullptr;
    groups.Load(buffers.group_sizes + b * view.groups);
    if (row != nullptr) groups.ZeroTail(row);
    if (col != nullptr) groups.ZeroTail(col);
    for (int64_t g = 0; g < view.groups; ++g) {
      const int64_t first = groups.start(g) * view.cols;
      const int64_t slot = b * view.groups + g;
      dense.rows = groups.rows(g);
      Fp8QuantizeBuffers sub;
      sub.x = x + first * x_bytes;
      sub.scale = buffers.scale + slot;
      sub.row = row != nullptr ? row + first : nullptr;
      sub.col = col != nullptr ? col + first : nullptr;
      sub.scale_inv = buffers.scale_inv + slot;
      sub.amax = buffers.amax + slot;
      Fp8Quantize(dense, sub, parallel);
    }
  }
}

// One example of a block-format op: its input and data outputs (null when
// absent), with the rows past the last group zeroed and the scale regions of
// its groups laid out (their padding zeroed). Data of one byte per element
// (MXFP8): row / col point at the example's first element. Packed E2M1 codes
// (NVFP4): row / col are the whole buffers, and the example's first element
// is code_first.
struct BlockExample {
  const uint8_t* x;
  uint8_t* row;
  uint8_t* col;
  int64_t code_first;
};

template <bool kPackedCodes, typename Problem, typename Buffers>
BlockExample StartBlockExample(const Problem& problem, const Buffers& buffers,
                               int64_t b, ExampleGroups& groups,
                               ScaleRegions& row_regions,
                               ScaleRegions& col_regions) {
  const GroupedView& view = problem.view;
  const int64_t elements = view.elements();
  const int64_t data_offset = kPackedCodes ? 0 : b * elements;
  BlockExample example;
  example.x = static_cast<const uint8_t*>(buffers.x) +
              b * elements * InputTypeBytes(view.input_type);
  example.row = problem.rowwise ? buffers.row + data_offset : nullptr;
  example.col = problem.colwise ? buffers.col + data_offset : nullptr;
  example.code_first = kPackedCodes ? b * elements : 0;
  groups.Load(buffers.group_sizes + b * view.groups);
  auto zero_tail = [&](uint8_t* data) {
    if constexpr (kPackedCodes) {
      groups.ZeroPackedTail(data, example.code_first);
    } else {
      groups.ZeroTail(data);
    }
  };
  if (example.row != nullptr) {
    zero_tail(example.row);
    row_regions.Start(groups, view.groups,
                      buffers.row_scale + b * problem.row_scale_bytes);
  }
  if (example.col != nullptr) {
    zero_tail(example.col);
    col_regions.Start(groups, view.groups,
                      buffers.col_scale + b * problem.col_scale_bytes);
  }
  return example;
}

// ---------------------------------------------------------------------------
// MXFP8

void QuantizeMxfp8(const GroupedMxfp8QuantizeProblem& problem,
                   const GroupedMxfp8QuantizeBuffers& buffers,
                   const ParallelFor& parallel) {
  const GroupedView& view = problem.view;
  const int64_t x_bytes = InputTypeBytes(view.input_type);
  const int64_t row_blocks = Mxfp8Blocks(view.cols);
  ExampleGroups groups(view);
  ScaleRegions row_regions(ScalePart::kRowwise, view.groups, view.cols,
                           kMxfp8BlockSize, problem.row_scale_bytes);
  ScaleRegions col_regions(ScalePart::kColwise, view.groups, view.cols,
                           kMxfp8BlockSize, problem.col_scale_bytes);
  std::vector<uint8_t> row_scale;  // the group's dense rowwise scales
  std::vector<uint8_t> col_scale;  // the group's dense colwise scales

  Mxfp8QuantizeProblem dense;
  dense.input_type = view.input_type;
  dense.format = problem.format;
  dense.outer = 1;
  dense.inner = 1;
  dense.last = view.cols;
  dense.rowwise = problem.rowwise;
  dense.colwise = problem.colwise;

  for (int64_t b = 0; b < view.batch; ++b) {
    const BlockExample example = StartBlockExample<false>(
        problem, buffers, b, groups, row_regions, col_regions);
    const uint8_t* x = example.x;
    uint8_t* row = example.row;
    uint8_t* col = example.col;
    for (int64_t g = 0; g < view.groups; ++g) {
      const int64_t rows = groups.rows(g);
      if (rows == 0) continue;  // nothing to write but the zeroed padding
      const int64_t first = groups.start(g) * view.cols;
      const int64_t col_blocks = Mxfp8Blocks(rows);
      dense.blocked = rows;
      Mxfp8QuantizeBuffers sub;
      sub.x = x + first * x_bytes;
      if (row != nullptr) {
        row_scale.resize(static_cast<size_t>(rows * row_blocks));
        sub.row = row + first;
        sub.row_scale = row_scale.data();
      }
      if (col != nullptr) {
        col_scale.resize(static_cast<size_t>(col_blocks * view.cols));
        sub.col = col + first;
        sub.col_scale = col_scale.data();
      }
      Mxfp8Quantize(dense, sub, parallel);
      // Rowwise T_g = the (rows, ceil(N/32)) scales; colwise T_g = the
      // transpose of the (ceil(rows/32), N) scales.
      if (row != nullptr) {
        row_regions.Store(g, rows, row_scale.data(), row_blocks, false);
      }
      if (col != nullptr) {
        col_regions.Store(g, rows, col_scale.data(), view.cols, true);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// NVFP4

void QuantizeNvfp4(const GroupedNvfp4QuantizeProblem& problem,
                   const GroupedNvfp4QuantizeBuffers& buffers,
                   const ParallelFor& parallel) {
  constexpr int64_t kBlock = grouped::kNvfp4Block;
  const GroupedView& view = problem.view;
  const int64_t x_bytes = InputTypeBytes(view.input_type);
  const int64_t row_blocks = grouped::CeilDiv(view.cols, kBlock);
  ExampleGroups groups(view);
  ScaleRegions row_regions(ScalePart::kRowwise, view.groups, view.cols, kBlock,
                           problem.row_scale_bytes);
  ScaleRegions col_regions(ScalePart::kColwise, view.groups, view.cols, kBlock,
                           problem.col_scale_bytes);
  std::vector<uint8_t> row_scale;  // the group's dense rowwise scales
  std::vector<uint8_t> col_scale;  // the group's dense colwise scales
  const int32_t zero_offset[2] = {0, 0};

  // A group is the 2-D (rows_g, N) example with blocked axis 0:
  // (A, K, C, L) = (1, rows_g, 1, N); the colwise part is stored (N, rows_g)
  // with (N, ceil(rows_g/16)) scales, the T orientation already.
  Nvfp4QuantizeProblem dense;
  dense.view.input_type = view.input_type;
  dense.view.batch = 1;
  dense.view.a = 1;
  dense.view.c = 1;
  dense.view.l = view.cols;
  dense.view.k_axis = 0;
  dense.view.shape = {0, view.cols};
  dense.rowwise = problem.rowwise;
  dense.colwise = problem.colwise;
  dense.use_2d = problem.use_2d;
  dense.use_rht = false;
  dense.stochastic_rounding = problem.stochastic_rounding;
  dense.global_shape = {0, view.cols};

  for (int64_t b = 0; b < view.batch; ++b) {
    const BlockExample example = StartBlockExample<true>(
        problem, buffers, b, groups, row_regions, col_regions);
    const uint8_t* x = example.x;
    uint8_t* row = example.row;
    uint8_t* col = example.col;
    for (int64_t g = 0; g < view.groups; ++g) {
      const int64_t rows = groups.rows(g);
      if (rows == 0) continue;  // nothing to write but the zeroed padding
      const int64_t first = groups.start(g) * view.cols;
      const int64_t slot = b * view.groups + g;
      const int64_t col_blocks = grouped::CeilDiv(rows, kBlock);
      dense.view.k = rows;
      dense.view.shape[0] = rows;
      dense.global_shape[0] = rows;
      Nvfp4QuantizeBuffers sub;
      sub.x = x + first * x_bytes;
      sub.amax = buffers.amax + slot;
      sub.col_amax = buffers.amax + slot;
      // The keys are read (and present) only with stochastic rounding.
      sub.key = problem.stochastic_rounding ? buffers.keys + 2 * slot : nullptr;
      sub.offset = zero_offset;
      // The group's codes are elements code_first + first .. of the packed
      // buffers (both parts: the colwise T_g starts where the group's rows
      // do).
      sub.code_first = example.code_first + first;
      if (row != nullptr) {
        row_scale.resize(static_cast<size_t>(rows * row_blocks));
        sub.row = row;
        sub.row_scale = row_scale.data();
      }
      if (col != nullptr) {
        col_scale.resize(static_cast<size_t>(view.cols * col_blocks));
        sub.col = col;
        sub.col_scale = col_scale.data();
      }
      Nvfp4Quantize(dense, sub, parallel);
      if (row != nullptr) {
        row_regions.Store(g, rows, row_scale.data(), row_blocks, false);
      }
      if (col != nullptr) {
        col_regions.Store(g, rows, col_scale.data(), col_blocks, false);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// dbias

// Columns summed at a time: the tree's partial vectors of one panel stay in
// cache while the group's rows stream through.
constexpr int64_t kDbiasPanelCols = 2048;

// Row r of the group, columns [first_col, first_col + width), to f32.
template <typename Input>
struct GroupRowLoader {
  const typename Input::Storage* x;  // the group's first row
  int64_t cols;
  int64_t first_col;
  int64_t width;

  void operator()(int64_t r, float* out) const {
    const typename Input::Storage* src = x + r * cols + first_col;
    for (int64_t j = 0; j < width; ++j) out[j] = Input::ToFloat(src[j]);
  }
};

// Work below this many elements per task is not split; column ranges are
// multiples of kColumnAlign columns, at least kMinTaskColumns wide.
constexpr int64_t kMinTaskElements = int64_t{1} << 15;
constexpr int64_t kColumnAlign = 16;
constexpr int64_t kMinTaskColumns = 256;

// The tree partial vectors of the calling thread, kept between calls.
std::vector<float>& ThreadScratch() {
  thread_local std::vector<float> scratch;
  return scratch;
}

// Each group's sums in column ranges, in parallel: every tree of a column on
// one task (a column's sum never sees another column, so the bits do not
// depend on the split).
template <typename Input>
void SumGroups(const GroupedDbiasProblem& problem,
               const GroupedDbiasBuffers& buffers,
               const ParallelFor& parallel) {
  const GroupedView& view = problem.view;
  const int64_t elements = view.elements();
  const int64_t cols = view.cols;
  ExampleGroups groups(view);
  for (int64_t b = 0; b < view.batch; ++b) {
    const auto* x =
        static_cast<const typename Input::Storage*>(buffers.x) + b * elements;
    const int64_t first = b * view.groups * cols;  // in buffers.dbias
    groups.Load(buffers.group_sizes + b * view.groups);
    for (int64_t g = 0; g < view.groups; ++g) {
      // The dense kernel's tree for dbias_reduced_dims = {rows_g}.
      const int64_t dims[1] = {groups.rows(g)};
      const int64_t vectors =
          std::max<int64_t>(1, NestedTreeSumScratchVectors(dims, 1));
      const int64_t min_cols = std::max(
          kMinTaskColumns,
          grouped::CeilDiv(kMinTaskElements, std::max<int64_t>(1, dims[0])));
      ParallelRanges(
          parallel, cols, min_cols, kColumnAlign,
          [&](int64_t col_begin, int64_t col_end) {
            const int64_t panel =
                std::min<int64_t>(kDbiasPanelCols, col_end - col_begin);
            std::vector<float>& scratch = ThreadScratch();
            // The vectors, then one panel's sums (before the cast).
            scratch.resize(static_cast<size_t>((vectors + 1) * panel));
            float* sums = scratch.data() + vectors * panel;
            for (int64_t first_col = col_begin; first_col < col_end;
                 first_col += panel) {
              const int64_t width = std::min(panel, col_end - first_col);
              GroupRowLoader<Input> loader{x + groups.start(g) * cols, cols,
                                           first_col, width};
              NestedTreeSum(dims, 1, 0, width, loader, sums, scratch.data());
              for (int64_t c = 0; c < width; ++c) {
                StoreNarrowed(buffers.dbias_type, buffers.dbias,
                              first + g * cols + first_col + c, sums[c]);
              }
            }
          });
    }
  }
}

}  // namespace

void GroupedFp8Quantize(const GroupedFp8QuantizeProblem& problem,
                        const GroupedFp8QuantizeBuffers& buffers,
                        const ParallelFor& parallel) {
  QuantizeFp8(problem, buffers, parallel);
}

void GroupedMxfp8Quantize(const GroupedMxfp8QuantizeProblem& problem,
                          const GroupedMxfp8QuantizeBuffers& buffers,
                          const ParallelFor& parallel) {
  QuantizeMxfp8(problem, buffers, parallel);
}

void GroupedNvfp4Quantize(const GroupedNvfp4QuantizeProblem& problem,
                          const GroupedNvfp4QuantizeBuffers& buffers,
                          const ParallelFor& parallel) {
  QuantizeNvfp4(problem, buffers, parallel);
}

void GroupedDbias(const GroupedDbiasProblem& problem,
                  const GroupedDbiasBuffers& buffers,
                  const ParallelFor& parallel) {
  switch (problem.view.input_type) {
    case InputType::kF32:
      SumGroups<F32Input>(problem, buffers, parallel);
      return;
    case InputType::kF16:
      SumGroups<F16Input>(problem, buffers, parallel);
      return;
    case InputType::kBF16:
      SumGroups<Bf16Input>(problem, buffers, parallel);
      return;
  }
}

}  // namespace eqx_quant::cpu
