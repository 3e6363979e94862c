// The payload and scale values come from two 256-entry tables built per call
// from common/mx_decode.h (the CUDA kernel's own decoders), so every element
// is two loads and one multiply.

#include "mxfp8/dequantize_cpu.h"

#include <algorithm>
#include <cstdint>

#include "common/dequantize_store.h"
#include "common/fp8_format.h"
#include "common/mx_decode.h"

namespace eqx_quant::cpu {
namespace {

constexpr int64_t kBlock = 32;
// Elements below which a task is not worth a thread.
constexpr int64_t kMinTaskElements = int64_t{1} << 16;

struct Tables {
  float payload[256];
  float scale[256];
};

template <typename Format>
void FillTables(Tables& t) {
  for (uint32_t byte = 0; byte < 256; ++byte) {
    t.payload[byte] = Fp8Value<Format>(byte);
    t.scale[byte] = E8m0Value(byte);
  }
}

// Rows [begin, end) of a (A, L, 1) view: blocks along the row.
template <bool kF32>
void DecodeRows(const Mxfp8DequantizeProblem& p, const Tables& t, int64_t begin, int64_t end) {
  const int64_t blocks = (p.l + kBlock - 1) / kBlock;
  for (int64_t a = begin; a < end; ++a) {
    const uint8_t* data = p.data + a * p.l;
    const uint8_t* scales = p.scales + a * blocks;
    for (int64_t k = 0; k < blocks; ++k) {
      const float scale = t.scale[scales[k]];
      const int64_t stop = std::min(p.l, (k + 1) * kBlock);
      for (int64_t l = k * kBlock; l < stop; ++l) {
        StoreValue<kF32>(p.out, a * p.l + l, t.payload[data[l]] * scale);
      }
    }
  }
}

// Lines [begin, end) of the (A, L) lines of B elements: a scale per element.
template <bool kF32>
void DecodeLines(const Mxfp8DequantizeProblem& p, const Tables& t, int64_t begin, int64_t end) {
  const int64_t blocks = (p.l + kBlock - 1) / kBlock;
  int64_t a = begin / p.l;
  int64_t l = begin % p.l;
  for (int64_t line = begin; line < end; ++line) {
    const uint8_t* data = p.data + line * p.b;
    const uint8_t* scales = p.scales + (a * blocks + l / kBlock) * p.b;
    for (int64_t j = 0; j < p.b; ++j) {
      StoreValue<kF32>(p.out, line * p.b + j, t.payload[data[j]] * t.scale[scales[j]]);
    }
    if (++l == p.l) {
      l = 0;
      ++a;
    }
  }
}

template <bool kF32>
void Run(const Mxfp8DequantizeProblem& p, const Tables& t, const ParallelFor& parallel) {
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
  Tables tables;
  if (p.format == Fp8Format::kE4M3Fn) {
    FillTables<E4M3Fn>(tables);
  } else {
    FillTables<E5M2>(tables);
  }
  if (p.out_f32) {
    Run<true>(p, tables, parallel);
  } else {
    Run<false>(p, tables, parallel);
  }
}

}  // namespace eqx_quant::cpu
