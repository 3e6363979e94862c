#include "fp8_block/quantize_cpu.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/cpu_input.h"
#include "common/fp8_block_problem.h"
#include "common/fp8_format.h"
#include "common/parallel_for.h"

namespace eqx_quant::cpu {
namespace {

constexpr int64_t kB = kFp8Block;

// One 128x128 tile of one example's 2-D view, widened to f32 once, with the
// amax keys (common/fp8_format.h, AmaxKey) of its rows, its columns and the
// whole tile. Elements outside the view are not read (a partial tile counts
// as zero-padded, which changes no amax).
struct Tile {
  float values[kB][kB];
  uint32_t row_key[kB];
  uint32_t col_key[kB];
  uint32_t key = 0;
  int64_t rows = 0;
  int64_t cols = 0;
};

template <typename Input>
void LoadTile(const typename Input::Storage* x, int64_t stride, Tile& tile) {
  std::fill(tile.col_key, tile.col_key + tile.cols, 0u);
  tile.key = 0;
  for (int64_t i = 0; i < tile.rows; ++i) {
    uint32_t row_key = 0;
    const typename Input::Storage* src = x + i * stride;
    for (int64_t j = 0; j < tile.cols; ++j) {
      const float value = Input::ToFloat(src[j]);
      const uint32_t k = AmaxKey(value);
      tile.values[i][j] = value;
      row_key = std::max(row_key, k);
      tile.col_key[j] = std::max(tile.col_key[j], k);
    }
    tile.row_key[i] = row_key;
    tile.key = std::max(tile.key, row_key);
  }
}

template <typename Format>
float ScaleOf(uint32_t key, const Fp8BlockQuantizeProblem& p) {
  return Fp8BlockScale(BitsToFloat(key), BitsToFloat(Format::kMaxFiniteF32Bits),
                       p.input_max, p.power_2_scales, p.amax_epsilon);
}

template <typename Input, typename Format>
void QuantizeTile(const Fp8BlockQuantizeProblem& p,
                  const Fp8BlockQuantizeBuffers& buf, int64_t task) {
  const int64_t rb_count = Fp8Blocks(p.rows);
  const int64_t cb_count = Fp8Blocks(p.cols);
  const int64_t per_example = rb_count * cb_count;
  const int64_t b = task / per_example;
  const int64_t rb = task % per_example / cb_count;
  const int64_t cb = task % cb_count;
  const int64_t r0 = rb * kB;
  const int64_t c0 = cb * kB;
  const int64_t example = b * p.rows * p.cols;

  thread_local std::vector<Tile> storage(1);
  Tile& tile = storage[0];
  tile.rows = std::min(kB, p.rows - r0);
  tile.cols = std::min(kB, p.cols - c0);
  const auto* x = static_cast<const typename Input::Storage*>(buf.x);
  LoadTile<Input>(x + example + r0 * p.cols + c0, p.cols, tile);
  const float tile_scale = p.use_2d ? ScaleOf<Format>(tile.key, p) : 0.0f;

  if (p.rowwise) {
    uint8_t* row = buf.row + example + r0 * p.cols + c0;
    for (int64_t i = 0; i < tile.rows; ++i) {
      const float scale =
          p.use_2d ? tile_scale : ScaleOf<Format>(tile.row_key[i], p);
      if (!p.use_2d) {
        buf.row_scale[(b * p.rows + r0 + i) * cb_count + cb] = 1.0f / scale;
      }
      for (int64_t j = 0; j < tile.cols; ++j) {
        row[i * p.cols + j] = FloatToFp8<Format>(tile.values[i][j] * scale);
      }
    }
    if (p.use_2d) {
      buf.row_scale[(b * rb_count + rb) * cb_count + cb] = 1.0f / tile_scale;
    }
  }
  if (p.colwise) {
    // The transposed view (C, R): column j of the tile is row c0 + j of it.
    uint8_t* col = buf.col + example + c0 * p.rows + r0;
    for (int64_t j = 0; j < tile.cols; ++j) {
      const float scale =
          p.use_2d ? tile_scale : ScaleOf<Format>(tile.col_key[j], p);
      if (!p.use_2d) {
        buf.col_scale[(b * p.cols + c0 + j) * rb_count + rb] = 1.0f / scale;
      }
      for (int64_t i = 0; i < tile.rows; ++i) {
        col[j * p.rows + i] = FloatToFp8<Format>(tile.values[i][j] * scale);
      }
    }
    if (p.use_2d) {
      buf.col_scale[(b * cb_count + cb) * rb_count + rb] = 1.0f / tile_scale;
    }
  }
}

template <typename Input, typename Format>
void Run(const Fp8BlockQuantizeProblem& p, const Fp8BlockQuantizeBuffers& buf,
         const ParallelFor& parallel) {
  const int64_t tasks = p.batch * Fp8Blocks(p.rows) * Fp8Blocks(p.cols);
  parallel(tasks, [&](int64_t task) { QuantizeTile<Input, Format>(p, buf, task); });
}

template <typename Input>
void RunInput(const Fp8BlockQuantizeProblem& p,
              const Fp8BlockQuantizeBuffers& buf, const ParallelFor& parallel) {
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
