#include "mxfp8/quantize_cpu.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/cpu_input.h"
#include "common/e8m0.h"
#include "common/fp8_cast_avx2.h"
#include "common/fp8_format.h"
#include "common/mxfp8_problem.h"
#include "common/parallel_for.h"

namespace eqx_quant::cpu {
namespace {

constexpr int64_t kBlock = kMxfp8BlockSize;

// Colwise quantization works on panels of kBlock rows (one block row along K)
// and up to kTileCols columns. A tile's values are converted to f32 once, kept
// in a kBlock x kTileCols buffer (64 KiB, stays in L2) together with the
// running amax of each column, and encoded when the block's last row is in.
// A multiple of kBlock, so that rowwise blocks never straddle two tiles.
constexpr int64_t kTileCols = 512;
static_assert(kTileCols % kBlock == 0);

// One block of `count` (<= kBlock) elements: returns its scale byte and
// writes its FP8 bytes.
template <typename Input, typename Format>
inline __attribute__((always_inline)) uint8_t QuantizeBlock(
    const typename Input::Storage* __restrict src, int64_t count,
    uint8_t* __restrict out) {
  uint32_t amax_key = 0;
  for (int64_t i = 0; i < count; ++i) {
    amax_key = std::max(amax_key, AmaxKey(Input::ToFloat(src[i])));
  }
  const uint8_t scale = Mxfp8BlockScale<Format>(BitsToFloat(amax_key));
  const float factor = E8m0ReciprocalScale(scale);
  for (int64_t i = 0; i < count; ++i) {
    out[i] = FloatToFp8<Format>(Input::ToFloat(src[i]) * factor);
  }
  return scale;
}

#if defined(EQX_QUANT_FP8_CAST_AVX2)
// `blocks` whole blocks in AVX2 intrinsics (f32 and bf16 inputs), for the
// kernel's AVX2 copy: the same scale bytes and FP8 bytes as QuantizeBlock
// (common/fp8_cast_avx2.h is exact for every input). Not inlined: its caller
// is compiled for the baseline too.
template <typename Input, typename Format>
__attribute__((target("avx2"))) void QuantizeBlocksAvx2(
    const typename Input::Storage* __restrict src, int64_t blocks,
    uint8_t* __restrict out, uint8_t* __restrict scales) {
  for (int64_t b = 0; b < blocks; ++b, src += kBlock, out += kBlock) {
    __m256 values[4];
    __m256i keys = _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {
      values[k] = LoadAsFloats8<Input>(src + 8 * k);
      keys = MaxAmaxKeys8(keys, values[k]);
    }
    const uint8_t scale =
        Mxfp8BlockScale<Format>(BitsToFloat(HorizontalMaxKey(keys)));
    scales[b] = scale;
    const __m256 factor = _mm256_set1_ps(E8m0ReciprocalScale(scale));
    for (__m256& value : values) value = _mm256_mul_ps(value, factor);
    StoreFp8Codes32<Format>(out, values);
  }
}
#endif

// Whether the AVX2 copy of the kernel takes QuantizeBlocksAvx2 for whole
// blocks of this input type.
template <typename Input, bool kAvx2>
constexpr bool kIntrinsicBlocks =
#if defined(EQX_QUANT_FP8_CAST_AVX2)
    kAvx2 && kHasAvx2Load<Input>;
#else
    false;
#endif

// Rowwise: `lines` consecutive lines of `length` elements each, blocked from
// the start of each line. The ceil(length/32) scale bytes of a line are
// consecutive, and those of consecutive lines too.
template <typename Input, typename Format, bool kAvx2>
inline __attribute__((always_inline)) void QuantizeLines(
    const typename Input::Storage* src, int64_t lines, int64_t length,
    uint8_t* out, uint8_t* scales) {
  const int64_t full_blocks = length / kBlock;
  const int64_t tail = length - full_blocks * kBlock;
  for (int64_t line = 0; line < lines; ++line) {
#if defined(EQX_QUANT_FP8_CAST_AVX2)
    if constexpr (kIntrinsicBlocks<Input, kAvx2>) {
      QuantizeBlocksAvx2<Input, Format>(src, full_blocks, out, scales);
      scales += full_blocks;
      src += full_blocks * kBlock;
      out += full_blocks * kBlock;
    } else
#endif
    {
      for (int64_t b = 0; b < full_blocks; ++b) {
        // A constant count: the block loops are fully vectorised.
        *scales++ = QuantizeBlock<Input, Format>(src, kBlock, out);
        src += kBlock;
        out += kBlock;
      }
    }
    if (tail > 0) {
      *scales++ = QuantizeBlock<Input, Format>(src, tail, out);
      src += tail;
      out += tail;
    }
  }
}

// Colwise, first half: one row of a tile to f32 (into `values`), folding it
// into the running column amax keys.
template <typename Input>
inline __attribute__((always_inline)) void LoadTileRow(
    const typename Input::Storage* __restrict src, int64_t width,
    float* __restrict values, uint32_t* __restrict amax_keys) {
  for (int64_t j = 0; j < width; ++j) {
    const float value = Input::ToFloat(src[j]);
    values[j] = value;
    amax_keys[j] = std::max(amax_keys[j], AmaxKey(value));
  }
}

// Colwise, block scales of a tile's columns: the scale bytes and the factors
// 2^(127-E) of each column.
template <typename Format>
inline __attribute__((always_inline)) void ColumnScales(
    const uint32_t* __restrict amax_keys, int64_t width,
    uint8_t* __restrict scales, float* __restrict factors) {
  for (int64_t j = 0; j < width; ++j) {
    const uint8_t scale = Mxfp8BlockScale<Format>(BitsToFloat(amax_keys[j]));
    scales[j] = scale;
    factors[j] = E8m0ReciprocalScale(scale);
  }
}

// Colwise, second half: one row of a tile to FP8 with its columns' factors.
template <typename Format>
inline __attribute__((always_inline)) void StoreTileRow(
    const float* __restrict values, const float* __restrict factors,
    int64_t width, uint8_t* __restrict out) {
  for (int64_t j = 0; j < width; ++j) {
    out[j] = FloatToFp8<Format>(values[j] * factors[j]);
  }
}

#if defined(EQX_QUANT_FP8_CAST_AVX2)
// StoreTileRow in AVX2 intrinsics, 32 columns a step, the rest as
// StoreTileRow; the same bytes. Not inlined, as QuantizeBlocksAvx2.
template <typename Format>
__attribute__((target("avx2"))) void StoreTileRowAvx2(
    const float* __restrict values, const float* __restrict factors,
    int64_t width, uint8_t* __restrict out) {
  int64_t j = 0;
  for (; j + 32 <= width; j += 32) {
    __m256 scaled[4];
    for (int k = 0; k < 4; ++k) {
      scaled[k] = _mm256_mul_ps(_mm256_loadu_ps(values + j + 8 * k),
                                _mm256_loadu_ps(factors + j + 8 * k));
    }
    StoreFp8Codes32<Format>(out + j, scaled);
  }
  for (; j < width; ++j) out[j] = FloatToFp8<Format>(values[j] * factors[j]);
}
#endif

// Buffers of the colwise tiles (per thread, ThreadWorkspace).
struct Workspace {
  float* values = nullptr;        // kBlock x kTileCols
  uint32_t* amax_keys = nullptr;  // kTileCols
  float* factors = nullptr;       // kTileCols
};

// One tile: rows [k0, k0 + rows) (one block along K) of example slice `a`,
// columns [c0, c0 + lines) x [l0, l0 + length) of (C, L); either lines == 1
// or (l0 == 0 and length == L), so the tile's part of each row is one
// contiguous run of width = lines * length elements.
struct Tile {
  int64_t a = 0;
  int64_t k0 = 0;
  int64_t rows = 0;
  int64_t c0 = 0;
  int64_t lines = 0;
  int64_t l0 = 0;
  int64_t length = 0;
};

template <typename Input, typename Format, bool kAvx2>
inline __attribute__((always_inline)) void QuantizeTile(
    const Mxfp8QuantizeProblem& problem, const Mxfp8QuantizeBuffers& buffers,
    const Tile& tile, const Workspace& workspace) {
  const auto* x = static_cast<const typename Input::Storage*>(buffers.x);
  const int64_t row_width = problem.inner * problem.last;  // C * L
  const int64_t row_blocks = Mxfp8Blocks(problem.last);
  const int64_t width = tile.lines * tile.length;
  const int64_t first_col = tile.c0 * problem.last + tile.l0;
  std::fill(workspace.amax_keys, workspace.amax_keys + width, 0u);
  for (int64_t r = 0; r < tile.rows; ++r) {
    const int64_t row = tile.a * problem.blocked + tile.k0 + r;  // (a, k)
    const int64_t offset = row * row_width + first_col;
    float* values = workspace.values + r * kTileCols;
    LoadTileRow<Input>(x + offset, width, values, workspace.amax_keys);
    if (problem.rowwise) {
      const int64_t line = row * problem.inner + tile.c0;  // (a, k, c0)
      QuantizeLines<F32Input, Format, kAvx2>(
          values, tile.lines, tile.length, buffers.row + offset,
          buffers.row_scale + line * row_blocks + tile.l0 / kBlock);
    }
  }
  const int64_t col_block = tile.a * Mxfp8Blocks(problem.blocked) +
                            tile.k0 / kBlock;  // (a, kb)
  ColumnScales<Format>(workspace.amax_keys, width,
                       buffers.col_scale + col_block * row_width + first_col,
                       workspace.factors);
  for (int64_t r = 0; r < tile.rows; ++r) {
    const int64_t row = tile.a * problem.blocked + tile.k0 + r;
    const float* values = workspace.values + r * kTileCols;
    uint8_t* out = buffers.col + row * row_width + first_col;
#if defined(EQX_QUANT_FP8_CAST_AVX2)
    if constexpr (kAvx2) {
      StoreTileRowAvx2<Format>(values, workspace.factors, width, out);
    } else
#endif
    {
      StoreTileRow<Format>(values, workspace.factors, width, out);
    }
  }
}

// The tiles of a colwise call: block rows along K in order, each split into
// tiles of whole L-lines (short L) or of kTileCols-wide pieces of one line
// (long L); tile t is the t-th in that order.
struct TilePlan {
  int64_t lines_per_tile = 1;  // short L: lines of a tile; long L: 1
  int64_t per_c = 1;           // long L: tiles per line
  int64_t per_block_row = 0;   // tiles per block row
  int64_t block_rows = 0;      // per a
  int64_t count = 0;

  explicit TilePlan(const Mxfp8QuantizeProblem& problem) {
    const int64_t last = problem.last;
    if (last <= kTileCols) {
      lines_per_tile = kTileCols / last;
      per_block_row = (problem.inner + lines_per_tile - 1) / lines_per_tile;
    } else {
      per_c = (last + kTileCols - 1) / kTileCols;
      per_block_row = problem.inner * per_c;
    }
    block_rows = Mxfp8Blocks(problem.blocked);
    count = problem.outer * block_rows * per_block_row;
  }

  Tile Get(const Mxfp8QuantizeProblem& problem, int64_t t) const {
    Tile tile;
    const int64_t j = t % per_block_row;
    const int64_t block_row = t / per_block_row;
    tile.a = block_row / block_rows;
    tile.k0 = (block_row % block_rows) * kBlock;
    tile.rows = std::min(kBlock, problem.blocked - tile.k0);
    if (problem.last <= kTileCols) {
      tile.c0 = j * lines_per_tile;
      tile.lines = std::min(lines_per_tile, problem.inner - tile.c0);
      tile.l0 = 0;
      tile.length = problem.last;
    } else {
      tile.c0 = j / per_c;
      tile.lines = 1;
      tile.l0 = (j % per_c) * kTileCols;
      tile.length = std::min(kTileCols, problem.last - tile.l0);
    }
    return tile;
  }
};

// Items [begin, end) of the call: rowwise only, lines (straight from x);
// colwise (and rowwise), the tiles of TilePlan.
template <typename Input, typename Format, bool kAvx2>
inline __attribute__((always_inline)) void QuantizeBody(
    const Mxfp8QuantizeProblem& problem, const Mxfp8QuantizeBuffers& buffers,
    const Workspace& workspace, int64_t begin, int64_t end) {
  if (!problem.colwise) {
    const int64_t last = problem.last;
    QuantizeLines<Input, Format, kAvx2>(
        static_cast<const typename Input::Storage*>(buffers.x) + begin * last,
        end - begin, last, buffers.row + begin * last,
        buffers.row_scale + begin * Mxfp8Blocks(last));
    return;
  }
  const TilePlan plan(problem);
  for (int64_t t = begin; t < end; ++t) {
    QuantizeTile<Input, Format, kAvx2>(problem, buffers, plan.Get(problem, t),
                                       workspace);
  }
}

// The element loops are branch-free so that they vectorise; the FP8 rounding
// needs per-lane variable shifts, which x86-64's baseline SSE2 lacks, so on
// x86-64 an AVX2 copy of the whole kernel is also compiled and picked at run
// time.
template <typename Input, typename Format>
void QuantizeGeneric(const Mxfp8QuantizeProblem& problem,
                     const Mxfp8QuantizeBuffers& buffers,
                     const Workspace& workspace, int64_t begin, int64_t end) {
  QuantizeBody<Input, Format, false>(problem, buffers, workspace, begin, end);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define EQX_QUANT_MXFP8_CPU_AVX2_VARIANT 1
template <typename Input, typename Format>
__attribute__((target("avx2"))) void QuantizeAvx2(
    const Mxfp8QuantizeProblem& problem, const Mxfp8QuantizeBuffers& buffers,
    const Workspace& workspace, int64_t begin, int64_t end) {
  QuantizeBody<Input, Format, true>(problem, buffers, workspace, begin, end);
}
#endif

// The colwise tile buffers of the calling thread, kept between calls.
Workspace ThreadWorkspace() {
  thread_local std::vector<float> values(kBlock * kTileCols);
  thread_local std::vector<uint32_t> amax_keys(kTileCols);
  thread_local std::vector<float> factors(kTileCols);
  return {values.data(), amax_keys.data(), factors.data()};
}

// Work below this many elements per task is not split.
constexpr int64_t kMinTaskElements = int64_t{1} << 15;

template <typename Input, typename Format>
void QuantizeAll(const Mxfp8QuantizeProblem& problem,
                 const Mxfp8QuantizeBuffers& buffers,
                 const ParallelFor& parallel) {
  // Items: lines (rowwise only) or tiles, independent (each writes its own
  // bytes and scales), in ranges.
  int64_t items = problem.outer * problem.blocked * problem.inner;
  int64_t item_elements = problem.last;
  if (problem.colwise) {
    const TilePlan plan(problem);
    items = plan.count;
    item_elements =
        kBlock * std::min(kTileCols, plan.lines_per_tile * problem.last);
  }
  const int64_t min_items = (kMinTaskElements + item_elements - 1) /
                            std::max<int64_t>(1, item_elements);
  ParallelRanges(
      parallel, items, min_items, 1, [&](int64_t begin, int64_t end) {
        const Workspace workspace =
            problem.colwise ? ThreadWorkspace() : Workspace();
#if defined(EQX_QUANT_MXFP8_CPU_AVX2_VARIANT)
        if (__builtin_cpu_supports("avx2")) {
          QuantizeAvx2<Input, Format>(problem, buffers, workspace, begin, end);
          return;
        }
#endif
        QuantizeGeneric<Input, Format>(problem, buffers, workspace, begin, end);
      });
}

template <typename Input>
void DispatchFormat(const Mxfp8QuantizeProblem& problem,
                    const Mxfp8QuantizeBuffers& buffers,
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

void Mxfp8Quantize(const Mxfp8QuantizeProblem& problem,
                   const Mxfp8QuantizeBuffers& buffers,
                   const ParallelFor& parallel) {
  const int64_t elements =
      problem.outer * problem.blocked * problem.inner * problem.last;
  if (elements == 0) return;  // then every output is empty too
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
