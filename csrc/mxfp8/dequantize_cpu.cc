// The payload and scale values come from per-call tables
// (mxfp8/dequantize_block_cpu.h, built from common/mx_decode.h, the CUDA
// kernel's own decoders), so every element is two loads and one multiply;
// rowwise bfloat16 blocks go through the block decode shared with the grouped
// kernel.

#include "mxfp8/dequantize_cpu.h"

#include <algorithm>
#include <cstdint>

#include "common/dequantize_store.h"
#include "mxfp8/dequantize_block_cpu.h"

namespace eqx_quant::cpu {
namespace {

constexpr int64_t kBlock = kMxfp8DecodeBlock;
// Elements below which a task is not worth a thread.
constexpr int64_t kMinTaskElements = int64_t{1} << 16;

// Rows [begin, end) of a (A, L, 1) view: blocks along the row.
template <bool kF32>
void DecodeRows(const Mxfp8DequantizeProblem& p, const Mxfp8DecodeTables& t, int64_t begin,
                int64_t end) {
  const int64_t blocks = (p.l + kBlock - 1) / kBlock;
  auto* out = static_cast<StoredValue<kF32>*>(p.out);
  for (int64_t a = begin; a < end; ++a) {
    const uint8_t* data = p.data + a * p.l;
    const uint8_t* scales = p.scales + a * blocks;
    for (int64_t k = 0; k < blocks; ++k) {
      const int64_t first = k * kBlock;
      const int64_t count = std::min(p.l, first + kBlock) - first;
      if constexpr (kF32) {
        const float scale = t.scale[scales[k]];
        for (int64_t l = first; l < first + count; ++l) {
          out[a * p.l + l] = Stored<kF32>(t.payload[data[l]] * scale);
        }
      } else {
        DecodeMxfp8BlockBf16(data + first, count, scales[k], t, out + a * p.l + first);
      }
    }
  }
}

// Lines [begin, end) of the (A, L) lines of B elements: a scale per element.
template <bool kF32>
void DecodeLines(const Mxfp8DequantizeProblem& p, const Mxfp8DecodeTables& t, int64_t begin,
                 int64_t end) {
  const int64_t blocks = (p.l + kBlock - 1) / kBlock;
  auto* out = static_cast<StoredValue<kF32>*>(p.out);
  int64_t a = begin / p.l;
  int64_t l = begin % p.l;
  for (int64_t line = begin; line < end; ++line) {
    const uint8_t* data = p.data + line * p.b;
    const uint8_t* scales = p.scales + (a * blocks + l / kBlock) * p.b;
    for (int64_t j = 0; j < p.b; ++j) {
      out[line * p.b + j] = Stored<kF32>(t.payload[data[j]] * t.scale[scales[j]]);
    }
    if (++l == p.l) {
      l = 0;
      ++a;
    }
  }
}

template <bool kF32>
void Run(const Mxfp8DequantizeProblem& p, const Mxfp8DecodeTables& t,
         const ParallelFor& parallel) {
  if (p.b == 1) {
    ParallelRanges(parallel, p.a, std::max<int64_t>(1, kMinTaskElements / p.l), 1,
                   [&](int64_t begin, int64_t end) { DecodeRows<kF32>(p, t, begin, end); });
  } else {
    ParallelRanges(parallel, p.a * p.l, std::max<int64_t>(1, kMinTaskElements / p.b), 1,
                   [&](int64_t begin, int64_t end) { DecodeLines<kF32>(p, t, begin, end); });
  }
}

}  // namespace

void Mxfp8Dequantize(const Mxfp8DequantizeProblem& p, const ParallelFor& parallel) {
  if (p.a * p.l * p.b == 0) return;
  Mxfp8DecodeTables tables;
  FillMxfp8DecodeTables(p.format, tables);
  if (p.out_f32) {
    Run<true>(p, tables, parallel);
  } else {
    Run<false>(p, tables, parallel);
  }
}

}  // namespace eqx_quant::cpu
