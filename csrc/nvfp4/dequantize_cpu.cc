// Each 16-block first computes the 16 values its codes can take (the same
// two float32 multiplies per value as an element-by-element loop, so the same
// bits), then its elements are look-ups by code: a byte of packed codes gives
// two, and only a row of odd length starts mid-byte.

#include "nvfp4/dequantize_cpu.h"

#include <algorithm>
#include <cstdint>

#include "common/dequantize_store.h"
#include "common/nvfp4_format.h"

namespace eqx_quant::cpu {
namespace {

constexpr int64_t kBlock = 16;
// Elements below which a task is not worth a thread.
constexpr int64_t kMinTaskElements = int64_t{1} << 16;

template <bool kF32>
void DecodeRows(const Nvfp4DequantizeProblem& p, const float (&e2m1)[16], int64_t begin,
                int64_t end) {
  const int64_t blocks = (p.cols + kBlock - 1) / kBlock;
  const int64_t rows_per_example = p.rows / p.examples;
  auto* out = static_cast<StoredValue<kF32>*>(p.out);
  for (int64_t r = begin; r < end; ++r) {
    const float decode = p.decode_scales[r / rows_per_example];
    for (int64_t k = 0; k < blocks; ++k) {
      const float scale = E4M3ToFloat(p.scales[r * blocks + k]);
      StoredValue<kF32> table[16];
      for (int code = 0; code < 16; ++code) {
        table[code] = Stored<kF32>((e2m1[code] * scale) * decode);
      }
      const uint64_t first = static_cast<uint64_t>(r * p.cols + k * kBlock);
      const uint64_t last =
          static_cast<uint64_t>(r * p.cols + std::min(p.cols, (k + 1) * kBlock));
      uint64_t i = first;
      if (i % 2 == 1) {  // a row of odd length starts in the high nibble
        out[i] = table[p.codes[i / 2] >> 4];
        ++i;
      }
      for (; i + 1 < last; i += 2) {
        const uint8_t pair = p.codes[i / 2];
        out[i] = table[pair & 0xFu];
        out[i + 1] = table[pair >> 4];
      }
      if (i < last) out[i] = table[p.codes[i / 2] & 0xFu];
    }
  }
}

}  // namespace
void Nvfp4Dequantize(const Nvfp4DequantizeProblem& p, const ParallelFor& parallel) {
  if (p.rows * p.cols == 0) return;
  float e2m1[16];
  for (uint32_t code = 0; code < 16; ++code) e2m1[code] = E2M1ToFloat(code);
  const int64_t min_rows = std::max<int64_t>(1, kMinTaskElements / p.cols);
  ParallelRanges(parallel, p.rows, min_rows, 1, [&](int64_t begin, int64_t end) {
    if (p.out_f32) {
      DecodeRows<true>(p, e2m1, begin, end);
    } else {
      DecodeRows<false>(p, e2m1, begin, end);
    }
  });
}

}  // namespace eqx_quant::cpu
