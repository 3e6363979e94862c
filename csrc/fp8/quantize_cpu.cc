#include "fp8/quantize_cpu.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/byte_transpose.h"
#include "common/cpu_input.h"
#include "common/float_narrow.h"
#include "common/fp8_cast_avx2.h"
#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"
#include "common/parallel_for.h"
#include "common/tree_sum.h"

namespace eqx_quant::cpu {
namespace {

// An example is processed in panels of up to kPanelCols columns (whole rows
// when only the rowwise cast is asked for). Within a panel the rows are read
// in increasing order, so x is streamed in runs of kPanelCols elements.
constexpr int64_t kPanelCols = 2048;
// The colwise (transposed) output is produced kTileRows rows at a time: the
// FP8 bytes of kTileRows consecutive rows of the panel, in the row output or
// (colwise only) staged in a buffer, are written out transposed, one
// contiguous kTileRows-byte run (one cache line) per output row. The staging
// rows are padded by kStagingPad bytes so that reading a staged column does
// not hit a single L1 set.
constexpr int64_t kTileRows = 64;
constexpr int64_t kStagingPad = 64;

// The element loop: converts `count` inputs, casts float(x) * scale to FP8
// into `bytes`, optionally stores float(x) in `values`, and returns the
// running amax key. Branch-free per element so that it vectorises; the FP8
// rounding needs per-lane variable shifts, which x86-64's baseline SSE2
// lacks, so on x86-64 an AVX2 copy is also compiled and picked at run time.
template <typename Input, typename Format, bool kKeepValues>
inline __attribute__((always_inline)) uint32_t QuantizeSpanBody(
    const typename Input::Storage* __restrict src, int64_t count, float scale,
    uint8_t* __restrict bytes, float* __restrict values, uint32_t amax_key) {
  for (int64_t j = 0; j < count; ++j) {
    const float value = Input::ToFloat(src[j]);
    if constexpr (kKeepValues) values[j] = value;
    amax_key = std::max(amax_key, AmaxKey(value));
    bytes[j] = FloatToFp8<Format>(value * scale);
  }
  return amax_key;
}

template <typename Input>
using QuantizeSpanFn = uint32_t (*)(const typename Input::Storage*, int64_t,
                                    float, uint8_t*, float*, uint32_t);

template <typename Input, typename Format, bool kKeepValues>
uint32_t QuantizeSpanGeneric(const typename Input::Storage* src, int64_t count,
                             float scale, uint8_t* bytes, float* values,
                             uint32_t amax_key) {
  return QuantizeSpanBody<Input, Format, kKeepValues>(src, count, scale, bytes,
                                                      values, amax_key);
}

#if defined(EQX_QUANT_FP8_CAST_AVX2)
#define EQX_QUANT_CPU_AVX2_VARIANT 1

// The element loop in AVX2, 32 elements a step (common/fp8_cast_avx2.h), the
// rest by QuantizeSpanBody; the same bytes, values and key. float16 inputs,
// whose widening needs F16C, run QuantizeSpanBody compiled for AVX2.
template <typename Input, typename Format, bool kKeepValues>
__attribute__((target("avx2"))) uint32_t
QuantizeSpanAvx2(const typename Input::Storage* src, int64_t count, float scale,
                 uint8_t* bytes, float* values, uint32_t amax_key) {
  int64_t j = 0;
  if constexpr (kHasAvx2Load<Input>) {
    const __m256 scale8 = _mm256_set1_ps(scale);
    __m256i keys = _mm256_setzero_si256();
    for (; j + 32 <= count; j += 32) {
      __m256 scaled[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 value = LoadAsFloats8<Input>(src + j + 8 * k);
        if constexpr (kKeepValues) _mm256_storeu_ps(values + j + 8 * k, value);
        keys = MaxAmaxKeys8(keys, value);
        scaled[k] = _mm256_mul_ps(value, scale8);
      }
      StoreFp8Codes32<Format>(bytes + j, scaled);
    }
    amax_key = std::max(amax_key, HorizontalMaxKey(keys));
  }
  return QuantizeSpanBody<Input, Format, kKeepValues>(
      src + j, count - j, scale, bytes + j,
      kKeepValues ? values + j : values, amax_key);
}
#endif

// The fastest element loop this CPU can run.
template <typename Input, typename Format, bool kKeepValues>
QuantizeSpanFn<Input> SelectQuantizeSpan() {
#if defined(EQX_QUANT_CPU_AVX2_VARIANT)
  if (__builtin_cpu_supports("avx2")) {
    return &QuantizeSpanAvx2<Input, Format, kKeepValues>;
  }
#endif
  return &QuantizeSpanGeneric<Input, Format, kKeepValues>;
}

// Quantizes one example, a panel of columns at a time. Within a panel the
// rows must be visited in increasing order (directly, or as the leaves of the
// dbias tree), each exactly once.
template <typename Input, typename Format, bool kKeepValues>
class PanelQuantizer {
 public:
  // `staging` must hold kTileRows * (kPanelCols + kStagingPad) bytes if
  // col_out is non-null, and a panel row if both outputs are null.
  PanelQuantizer(const typename Input::Storage* x, int64_t rows, int64_t cols,
                 float scale, uint8_t* row_out, uint8_t* col_out,
                 uint8_t* staging)
      : x_(x),
        rows_(rows),
        cols_(cols),
        scale_(scale),
        row_out_(row_out),
        col_out_(col_out),
        staging_(staging),
        quantize_span_(SelectQuantizeSpan<Input, Format, kKeepValues>()) {}

  void StartPanel(int64_t first_col, int64_t width) {
    first_col_ = first_col;
    width_ = width;
    tile_rows_ = 0;
  }

  // Processes columns [first_col, first_col + width) of row r, the next row
  // of the panel. Writes float(x) to `values` if kKeepValues.
  void operator()(int64_t r, float* values) {
    const typename Input::Storage* src = x_ + r * cols_ + first_col_;
    if (col_out_ == nullptr) {  // rowwise only: cast straight into `row`
      // (no output at all, dbias only: into the staging row, dropped)
      uint8_t* dst = row_out_ != nullptr ? row_out_ + r * cols_ + first_col_
                                         : staging_;
      amax_key_ = quantize_span_(src, width_, scale_, dst, values, amax_key_);
      return;
    }
    if (tile_rows_ == 0) tile_first_row_ = r;
    // With a row output the tile is transposed from there (still in cache);
    // colwise only, from the staging rows.
    uint8_t* dst = row_out_ != nullptr
                       ? row_out_ + r * cols_ + first_col_
                       : staging_ + tile_rows_ * kStagingStride;
    amax_key_ = quantize_span_(src, width_, scale_, dst, values, amax_key_);
    if (++tile_rows_ == kTileRows) FlushTile();
  }

  // Call after the last row of a panel.
  void FinishPanel() {
    if (tile_rows_ > 0) FlushTile();
  }

  uint32_t amax_key() const { return amax_key_; }

 private:
  static constexpr int64_t kStagingStride = kPanelCols + kStagingPad;

  // Writes the tile's rows [tile_first_row, + tile_rows) to the transposed
  // output: col[(first_col + j) * rows + tile_first_row + i] = tile[i][j].
  void FlushTile() {
    const bool in_row_out = row_out_ != nullptr;
    const uint8_t* tile =
        in_row_out ? row_out_ + tile_first_row_ * cols_ + first_col_ : staging_;
    TransposeBytes(tile, in_row_out ? cols_ : kStagingStride,
                   col_out_ + first_col_ * rows_ + tile_first_row_, rows_,
                   tile_rows_, width_);
    tile_rows_ = 0;
  }

  const typename Input::Storage* x_;
  int64_t rows_;
  int64_t cols_;
  float scale_;
  uint8_t* row_out_;
  uint8_t* col_out_;
  uint8_t* staging_;
  QuantizeSpanFn<Input> quantize_span_;
  int64_t first_col_ = 0;
  int64_t width_ = 0;
  uint32_t amax_key_ = 0;
  int64_t tile_first_row_ = 0;
  int64_t tile_rows_ = 0;
};

// Per-thread buffers, kept between calls (a thread of XLA's pool runs the
// tasks of many calls; no task allocates in the steady state).
struct Workspace {
  std::vector<uint8_t> staging;  // transposition staging
  std::vector<float> tree;       // dbias tree partial vectors
};

Workspace& ThreadWorkspace() {
  thread_local Workspace workspace;
  return workspace;
}

// Work below this many elements per task is not split: waking a helper
// thread costs about as much as quantizing it.
constexpr int64_t kMinTaskElements = int64_t{1} << 15;
// Column ranges of the dbias split are multiples of this many columns (one
// cache line of the f32 dbias rows), at least kMinTaskColumns wide.
constexpr int64_t kColumnAlign = 16;
constexpr int64_t kMinTaskColumns = 256;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rowwise only, no dbias: the row output has x's layout, so the cast is one
// flat elementwise stream; returns the amax key of x[begin, end).
template <typename Input, typename Format>
uint32_t CastFlat(const typename Input::Storage* x, int64_t begin, int64_t end,
                  float scale, uint8_t* row_out) {
  const QuantizeSpanFn<Input> quantize_span =
      SelectQuantizeSpan<Input, Format, false>();
  return quantize_span(x + begin, end - begin, scale, row_out + begin, nullptr,
                       0u);
}

// A transposed copy, no dbias: rows [row_begin, row_end) of the panel of
// columns [first_col, first_col + width); returns their amax key.
template <typename Input, typename Format>
uint32_t CastPanelRows(const Fp8QuantizeProblem& problem,
                       const typename Input::Storage* x, float scale,
                       uint8_t* row_out, uint8_t* col_out, int64_t row_begin,
                       int64_t row_end, int64_t first_col, int64_t width) {
  Workspace& workspace = ThreadWorkspace();
  workspace.staging.resize(kTileRows * (kPanelCols + kStagingPad));
  PanelQuantizer<Input, Format, false> quantizer(x, problem.rows, problem.cols,
                                                 scale, row_out, col_out,
                                                 workspace.staging.data());
  quantizer.StartPanel(first_col, width);
  for (int64_t r = row_begin; r < row_end; ++r) quantizer(r, nullptr);
  quantizer.FinishPanel();
  return quantizer.amax_key();
}

// With dbias: columns [col_begin, col_end) of every row, a panel of at most
// kPanelCols columns at a time, the rows of each panel visited as the leaves
// of the dbias trees (each column's trees only ever see that column, so a
// column range gives the bits of the whole example). Returns the amax key.
template <typename Input, typename Format>
uint32_t CastColumnsWithDbias(const Fp8QuantizeProblem& problem,
                              const typename Input::Storage* x, float scale,
                              uint8_t* row_out, uint8_t* col_out,
                              float* dbias_out, int64_t col_begin,
                              int64_t col_end) {
  const int64_t cols = problem.cols;
  Workspace& workspace = ThreadWorkspace();
  workspace.staging.resize(kTileRows * (kPanelCols + kStagingPad));
  PanelQuantizer<Input, Format, true> quantizer(
      x, problem.rows, cols, scale, row_out, col_out, workspace.staging.data());
  // For every panel and every kept row index, the nested tree over the
  // reduced axes; its leaves are the rows, in increasing order.
  const int64_t* reduced_dims = problem.dbias_reduced_dims.data();
  const int num_reduced = static_cast<int>(problem.dbias_reduced_dims.size());
  int64_t reduced_rows = 1;
  for (int64_t dim : problem.dbias_reduced_dims) reduced_rows *= dim;
  const int64_t split = problem.dbias_split;
  const int64_t panel = std::min(kPanelCols, col_end - col_begin);
  const int64_t vectors = std::max<int64_t>(
      {1, NestedTreeSumScratchVectors(reduced_dims, num_reduced),
       TreeSumDepth(split)});
  workspace.tree.resize(static_cast<size_t>(vectors * panel));
  // Node p of the split axis covers [p*n/P, (p+1)*n/P) (P divides n); the
  // node's tree is the nested tree with the split axis shortened to it.
  const int64_t split_len = num_reduced > 0 ? reduced_dims[0] : 1;
  const int64_t rows_per_index = split_len > 0 ? reduced_rows / split_len : 0;
  std::vector<int64_t> node_dims(reduced_dims, reduced_dims + num_reduced);
  for (int64_t first_col = col_begin; first_col < col_end; first_col += panel) {
    const int64_t width = std::min(panel, col_end - first_col);
    quantizer.StartPanel(first_col, width);
    for (int64_t kept = 0; kept < problem.dbias_kept_rows; ++kept) {
      for (int64_t p = 0; p < split; ++p) {
        const int64_t begin = (p * split_len + split - 1) / split;
        const int64_t end = ((p + 1) * split_len + split - 1) / split;
        if (num_reduced > 0) node_dims[0] = end - begin;
        NestedTreeSum(node_dims.data(), num_reduced,
                      kept * reduced_rows + begin * rows_per_index, width,
                      quantizer,
                      dbias_out + (kept * split + p) * cols + first_col,
                      workspace.tree.data());
      }
      // Node 0 := the tree over the split nodes, which is the whole axis'
      // tree (the nodes are its depth-log2(split) subtrees); the other
      // nodes stay as they are.
      if (split > 1) {
        float* const nodes = dbias_out + kept * split * cols + first_col;
        auto node = [&](int64_t p, float* out, float* /*free_scratch*/) {
          const float* src = nodes + p * cols;
          if (out != src) std::copy(src, src + width, out);
        };
        TreeSum(0, split, width, node, nodes, workspace.tree.data());
      }
    }
    quantizer.FinishPanel();
  }
  return quantizer.amax_key();
}

// NaN results are written as the canonical quiet NaN 0x7FC00000 (whatever the
// payload of the NaN that produced them), so every implementation agrees.
void CanonicalizeNans(float* values, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    if (values[i] != values[i]) {
      const uint32_t quiet_nan = 0x7FC00000u;
      std::memcpy(&values[i], &quiet_nan, sizeof(float));
    }
  }
}

// The amax key of `count` inputs (NaN ignored). Branch-free, so that it
// vectorises; an AVX2 copy as for the cast.
template <typename Input>
inline __attribute__((always_inline)) uint32_t
SpanAmaxKeyBody(const typename Input::Storage* __restrict src, int64_t count) {
  uint32_t key = 0;
  for (int64_t j = 0; j < count; ++j) {
    key = std::max(key, AmaxKey(Input::ToFloat(src[j])));
  }
  return key;
}

template <typename Input>
uint32_t SpanAmaxKeyGeneric(const typename Input::Storage* src, int64_t count) {
  return SpanAmaxKeyBody<Input>(src, count);
}

#if defined(EQX_QUANT_CPU_AVX2_VARIANT)
template <typename Input>
__attribute__((target("avx2"))) uint32_t
SpanAmaxKeyAvx2(const typename Input::Storage* src, int64_t count) {
  return SpanAmaxKeyBody<Input>(src, count);
}
#endif

template <typename Input>
uint32_t SpanAmaxKey(const typename Input::Storage* src, int64_t count) {
#if defined(EQX_QUANT_CPU_AVX2_VARIANT)
  if (__builtin_cpu_supports("avx2")) return SpanAmaxKeyAvx2<Input>(src, count);
#endif
  return SpanAmaxKeyGeneric<Input>(src, count);
}

// The max of the pieces' keys (exact in any order).
uint32_t MaxKey(const std::vector<uint32_t>& keys) {
  uint32_t key = 0;
  for (uint32_t k : keys) key = std::max(key, k);
  return key;
}

// max |x| over `count` inputs, ignoring NaN (a pass of its own: current
// scaling needs it before the cast), split into ranges in parallel.
template <typename Input>
float ParallelAmax(const typename Input::Storage* x, int64_t count,
                   const ParallelFor& parallel) {
  const RangeSplit split =
      SplitRange(count, parallel.threads(), kMinTaskElements, 64);
  std::vector<uint32_t> keys(static_cast<size_t>(split.count), 0u);
  parallel(split.count, [&](int64_t piece) {
    const int64_t begin = split.begin(piece);
    keys[piece] =
        SpanAmaxKey<Input>(x + begin, split.end(piece, count) - begin);
  });
  return BitsToFloat(MaxKey(keys));
}

// Example b, its work split over `parallel`.
template <typename Input, typename Format>
void QuantizeExample(const Fp8QuantizeProblem& problem,
                     const Fp8QuantizeBuffers& buffers, int64_t b,
                     const ParallelFor& parallel) {
  const int64_t rows = problem.rows;
  const int64_t cols = problem.cols;
  const int64_t elements = rows * cols;
  const int64_t dbias_elements =
      problem.dbias_kept_rows * problem.dbias_split * cols;
  const auto* x =
      static_cast<const typename Input::Storage*>(buffers.x) + b * elements;
  const float scale =
      problem.scale_from_amax
          ? ScaleFromAmax(ParallelAmax<Input>(x, elements, parallel),
                          buffers.scale[b], problem.format)
          : buffers.scale[b];
  buffers.scale_inv[b] = 1.0f / scale;
  CanonicalizeNans(buffers.scale_inv + b, 1);
  uint8_t* row = problem.rowwise ? buffers.row + b * elements : nullptr;
  uint8_t* col = problem.colwise ? buffers.col + b * elements : nullptr;
  const int64_t threads = parallel.threads();
  std::vector<uint32_t> keys;
  if (problem.with_dbias) {
    // Column ranges: each task runs every tree of its columns.
    float* dbias = buffers.dbias + b * dbias_elements;
    const int64_t min_cols = std::max(
        kMinTaskColumns, CeilDiv(kMinTaskElements, std::max<int64_t>(rows, 1)));
    const RangeSplit split = SplitRange(cols, threads, min_cols, kColumnAlign);
    keys.assign(static_cast<size_t>(split.count), 0u);
    parallel(split.count, [&](int64_t piece) {
      keys[piece] = CastColumnsWithDbias<Input, Format>(
          problem, x, scale, row, col, dbias, split.begin(piece),
          split.end(piece, cols));
    });
    CanonicalizeNans(dbias, dbias_elements);
    if (problem.dbias_cast) {
      // Node 0 of each kept row's tree, in the input type.
      const int64_t first = b * problem.dbias_kept_rows * cols;
      for (int64_t kept = 0; kept < problem.dbias_kept_rows; ++kept) {
        for (int64_t c = 0; c < cols; ++c) {
          StoreNarrowed(problem.input_type, buffers.dbias_cast,
                        first + kept * cols + c,
                        dbias[kept * problem.dbias_split * cols + c]);
        }
      }
    }
  } else if (col == nullptr) {
    // Rowwise only: flat ranges of the example.
    const RangeSplit split =
        SplitRange(elements, threads, kMinTaskElements, 64);
    keys.assign(static_cast<size_t>(split.count), 0u);
    parallel(split.count, [&](int64_t piece) {
      keys[piece] = CastFlat<Input, Format>(
          x, split.begin(piece), split.end(piece, elements), scale, row);
    });
  } else {
    // A transposed copy: (row range, column panel) pairs, the row ranges
    // whole staging tiles.
    const int64_t panels = std::max<int64_t>(1, CeilDiv(cols, kPanelCols));
    const int64_t min_rows = CeilDiv(
        kMinTaskElements, std::max<int64_t>(1, std::min(cols, kPanelCols)));
    const RangeSplit split =
        SplitRange(rows, CeilDiv(threads, panels), min_rows, kTileRows);
    keys.assign(static_cast<size_t>(split.count * panels), 0u);
    parallel(split.count * panels, [&](int64_t item) {
      const int64_t piece = item / panels;
      const int64_t first_col = (item % panels) * kPanelCols;
      keys[item] = CastPanelRows<Input, Format>(
          problem, x, scale, row, col, split.begin(piece),
          split.end(piece, rows), first_col,
          std::min(kPanelCols, cols - first_col));
    });
  }
  buffers.amax[b] = BitsToFloat(MaxKey(keys));
}

template <typename Input, typename Format>
void QuantizeAll(const Fp8QuantizeProblem& problem,
                 const Fp8QuantizeBuffers& buffers,
                 const ParallelFor& parallel) {
  const int64_t elements = problem.rows * problem.cols;
  if (problem.batch > 1 && elements < 2 * kMinTaskElements) {
    // Small examples: whole examples per task, each on one thread.
    ParallelRanges(parallel, problem.batch,
                   CeilDiv(kMinTaskElements, std::max<int64_t>(1, elements)), 1,
                   [&](int64_t begin, int64_t end) {
                     for (int64_t b = begin; b < end; ++b) {
                       QuantizeExample<Input, Format>(problem, buffers, b,
                                                      ParallelFor());
                     }
                   });
    return;
  }
  for (int64_t b = 0; b < problem.batch; ++b) {
    QuantizeExample<Input, Format>(problem, buffers, b, parallel);
  }
}

template <typename Input>
void DispatchFormat(const Fp8QuantizeProblem& problem,
                    const Fp8QuantizeBuffers& buffers,
                    const ParallelFor& parallel) {
  switch (problem.format) {
    case Fp8Format::kE4M3Fn:
      QuantizeAll<Input, E4M3Fn>(problem, buffers, parallel);
      return;
    case Fp8Format::kE5M2:
      QuantizeAll<Input, E5M2>(problem, buffers, parallel);
      return;
  }
}

}  // namespace

void Fp8Quantize(const Fp8QuantizeProblem& problem,
                 const Fp8QuantizeBuffers& buffers,
                 const ParallelFor& parallel) {
  switch (problem.input_type) {
    case InputType::kF32:
      DispatchFormat<F32Input>(problem, buffers, parallel);
      return;
    case InputType::kF16:
      DispatchFormat<F16Input>(problem, buffers, parallel);
      return;
    case InputType::kBF16:
      DispatchFormat<Bf16Input>(problem, buffers, parallel);
      return;
  }
}

}  // namespace eqx_quant::cpu
