#include "fp8_block/quantize_cpu.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/cpu_input.h"
#include "common/fp8_block_problem.h"
#include "common/fp8_format.h"
#include "common/parallel_for.h"

namespace eqx_quant::cpu {
namespace {

constexpr int64_t kB = kFp8Block;

// The per-thread buffers of one 128x128 tile: its values widened to f32 once,
// the amax keys (common/fp8_format.h, AmaxKey) of its columns, each column's
// scale, and its colwise bytes (transposed) before they are copied out.
struct Workspace {
  float* values;      // kB x kB, row-major
  uint32_t* col_key;  // kB
  float* col_scale;   // kB
  uint8_t* col_bytes; // kB x kB, the tile's transposed FP8 bytes
};

Workspace ThreadWorkspace() {
  thread_local std::vector<float> values(kB * kB);
  thread_local std::vector<uint32_t> col_key(kB);
  thread_local std::vector<float> col_scale(kB);
  thread_local std::vector<uint8_t> col_bytes(kB * kB);
  return {values.data(), col_key.data(), col_scale.data(), col_bytes.data()};
}

template <typename Format>
inline float ScaleOf(uint32_t key, const Fp8BlockQuantizeProblem& p) {
  return Fp8BlockScale(BitsToFloat(key), BitsToFloat(Format::kMaxFiniteF32Bits),
                       p.input_max, p.power_2_scales, p.amax_epsilon);
}

// One tile (example b, row block rb, column block cb). Elements outside the
// view are not read: a partial tile counts as zero-padded, which changes no
// amax. The element loops are branch-free so that they vectorise.
template <typename Input, typename Format>
inline __attribute__((always_inline)) void QuantizeTile(
    const Fp8BlockQuantizeProblem& p, const Fp8BlockQuantizeBuffers& buf,
    const Workspace& ws, int64_t task) {
  const int64_t rb_count = Fp8Blocks(p.rows);
  const int64_t cb_count = Fp8Blocks(p.cols);
  const int64_t b = task / (rb_count * cb_count);
  const int64_t rb = task % (rb_count * cb_count) / cb_count;
  const int64_t cb = task % cb_count;
  const int64_t r0 = rb * kB;
  const int64_t c0 = cb * kB;
  const int64_t rows = std::min(kB, p.rows - r0);
  const int64_t cols = std::min(kB, p.cols - c0);
  const int64_t example = b * p.rows * p.cols;
  const auto* x = static_cast<const typename Input::Storage*>(buf.x) + example;
  const bool row_1d = p.rowwise && !p.use_2d;
  const bool col_1d = p.colwise && !p.use_2d;

  // Load: widen, with each row's key (its 1x128 block) and each column's.
  uint32_t row_keys[kB];
  uint32_t* __restrict col_key = ws.col_key;
  std::fill(col_key, col_key + cols, 0u);
  uint32_t tile_key = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const typename Input::Storage* __restrict src = x + (r0 + i) * p.cols + c0;
    float* __restrict dst = ws.values + i * kB;
    uint32_t key = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const float value = Input::ToFloat(src[j]);
      const uint32_t k = AmaxKey(value);
      dst[j] = value;
      key = std::max(key, k);
      col_key[j] = std::max(col_key[j], k);
    }
    row_keys[i] = key;
    tile_key = std::max(tile_key, key);
  }
  const float tile_scale = p.use_2d ? ScaleOf<Format>(tile_key, p) : 0.0f;

  if (p.rowwise) {
    for (int64_t i = 0; i < rows; ++i) {
      const float scale = row_1d ? ScaleOf<Format>(row_keys[i], p) : tile_scale;
      if (row_1d) buf.row_scale[(b * p.rows + r0 + i) * cb_count + cb] = 1.0f / scale;
      const float* __restrict src = ws.values + i * kB;
      uint8_t* __restrict dst = buf.row + example + (r0 + i) * p.cols + c0;
      for (int64_t j = 0; j < cols; ++j) dst[j] = FloatToFp8<Format>(src[j] * scale);
    }
    if (p.use_2d) {
      buf.row_scale[(b * rb_count + rb) * cb_count + cb] = 1.0f / tile_scale;
    }
  }
  if (p.colwise) {
    float* __restrict col_scale = ws.col_scale;
    for (int64_t j = 0; j < cols; ++j) {
      col_scale[j] = col_1d ? ScaleOf<Format>(col_key[j], p) : tile_scale;
    }
    if (col_1d) {
      for (int64_t j = 0; j < cols; ++j) {
        buf.col_scale[(b * p.cols + c0 + j) * rb_count + rb] = 1.0f / col_scale[j];
      }
    } else {
      buf.col_scale[(b * cb_count + cb) * rb_count + rb] = 1.0f / tile_scale;
    }
    // Row by row (contiguous reads, vectorised), into the transposed bytes.
    for (int64_t i = 0; i < rows; ++i) {
      const float* __restrict src = ws.values + i * kB;
      uint8_t* __restrict dst = ws.col_bytes + i;
      for (int64_t j = 0; j < cols; ++j) {
        dst[j * kB] = FloatToFp8<Format>(src[j] * col_scale[j]);
      }
    }
    // The transposed view (C, R): column j of the tile is row c0 + j of it.
    for (int64_t j = 0; j < cols; ++j) {
      std::memcpy(buf.col + example + (c0 + j) * p.rows + r0, ws.col_bytes + j * kB,
                  static_cast<size_t>(rows));
    }
  }
}

template <typename Input, typename Format>
inline __attribute__((always_inline)) void QuantizeTileRange(
    const Fp8BlockQuantizeProblem& p, const Fp8BlockQuantizeBuffers& buf, int64_t begin,
    int64_t end) {
  const Workspace ws = ThreadWorkspace();
  for (int64_t task = begin; task < end; ++task) {
    QuantizeTile<Input, Format>(p, buf, ws, task);
  }
}

template <typename Input, typename Format>
void QuantizeTiles(const Fp8BlockQuantizeProblem& p, const Fp8BlockQuantizeBuffers& buf,
                   int64_t begin, int64_t end) {
  QuantizeTileRange<Input, Format>(p, buf, begin, end);
}

// The FP8 rounding needs per-lane variable shifts, which x86-64's baseline
// SSE2 lacks: an AVX2 copy of the tile loop is also compiled and picked at run
// time (the same arithmetic, so the same bytes).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define EQX_QUANT_FP8_BLOCK_CPU_AVX2_VARIANT 1
template <typename Input, typename Format>
__attribute__((target("avx2"))) void QuantizeTilesAvx2(
    const Fp8BlockQuantizeProblem& p, const Fp8BlockQuantizeBuffers& buf, int64_t begin,
    int64_t end) {
  QuantizeTileRange<Input, Format>(p, buf, begin, end);
}
#endif

// Work below this many elements per task is not split (one tile: 2^14).
constexpr int64_t kMinTaskTiles = 4;

template <typename Input, typename Format>
void Run(const Fp8BlockQuantizeProblem& p, const Fp8BlockQuantizeBuffers& buf,
         const ParallelFor& parallel) {
  const int64_t tiles = p.batch * Fp8Blocks(p.rows) * Fp8Blocks(p.cols);
  ParallelRanges(parallel, tiles, kMinTaskTiles, 1, [&](int64_t begin, int64_t end) {
#if defined(EQX_QUANT_FP8_BLOCK_CPU_AVX2_VARIANT)
    if (__builtin_cpu_supports("avx2")) {
      QuantizeTilesAvx2<Input, Format>(p, buf, begin, end);
      return;
    }
#endif
    QuantizeTiles<Input, Format>(p, buf, begin, end);
  });
}

template <typename Input>
void RunInput(const Fp8BlockQuantizeProblem& p, const Fp8BlockQuantizeBuffers& buf,
              const ParallelFor& parallel) {
  if (p.format == Fp8Format::kE4M3Fn) {
    Run<Input, E4M3Fn>(p, buf, parallel);
  } else {
    Run<Input, E5M2>(p, buf, parallel);
  }
}

}  // namespace

void Fp8BlockQuantize(const Fp8BlockQuantizeProblem& problem,
                      const Fp8BlockQuantizeBuffers& buffers,
                      const ParallelFor& parallel) {
  if (problem.batch == 0 || problem.rows == 0 || problem.cols == 0) return;
  switch (problem.input_type) {
    case InputType::kF32:
      RunInput<F32Input>(problem, buffers, parallel);
      break;
    case InputType::kF16:
      RunInput<F16Input>(problem, buffers, parallel);
      break;
    case InputType::kBF16:
      RunInput<Bf16Input>(problem, buffers, parallel);
      break;
  }
}

}  // namespace eqx_quant::cpu
