// The payload and scale values come from two 256-entry tables built per call
// from common/mx_decode.h (the CUDA kernel's own decoders), so every element
// is two loads and one multiply. Rowwise bfloat16 blocks whose scale keeps
// every product a normal number take a shorter path: the payload's bfloat16
// bits (exact: FP8 has fewer significand bits) with the scale's exponent
// added, which is that product rounded to bfloat16 exactly.

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
  uint16_t payload_bf16[256];  // exact; NaN as 0x7FC0
  // The E8M0 bytes whose 2^(e - 127) times any finite nonzero payload is a
  // normal float32 (and bfloat16) number.
  uint32_t exact_shift_lo = 0;
  uint32_t exact_shift_hi = 0;
};

template <typename Format>
void FillTables(Tables& t) {
  for (uint32_t byte = 0; byte < 256; ++byte) {
    t.payload[byte] = Fp8Value<Format>(byte);
    t.scale[byte] = E8m0Value(byte);
    t.payload_bf16[byte] = ToBf16Bits(t.payload[byte]);
  }
  // Finite nonzero payloads lie in [2^(1 - bias - mantissa bits), 2^(2^exp bits - bias)).
  const int low = 1 - Format::kExponentBias - Format::kMantissaBits;
  const int high = (1 << (7 - Format::kMantissaBits)) - Format::kExponentBias;
  t.exact_shift_lo = static_cast<uint32_t>(127 - 126 - low);  // e - 127 + low >= -126
  t.exact_shift_hi = static_cast<uint32_t>(127 + 127 - high);  // e - 127 + high <= 127
}

// bfloat16 bits of payload x 2^shift for a block whose scale byte is in the
// exact range: zeros, infinities and NaN (0x7FC0) are unchanged, every other
// value gets `shift` added to its exponent field.
inline uint16_t ShiftedBf16(uint16_t bits, uint16_t shift_field) {
  const bool unchanged = (bits & 0x7FFFu) == 0 || (bits & 0x7F80u) == 0x7F80u;
  return unchanged ? bits : static_cast<uint16_t>(bits + shift_field);
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
      if (!kF32 && scales[k] >= t.exact_shift_lo && scales[k] <= t.exact_shift_hi) {
        // (e - 127) << 7, modulo 2^16: the exponent stays in range.
        const auto shift_field = static_cast<uint16_t>((scales[k] - 127u) << 7);
        // The look-ups first, then the shift over the block in a loop the compiler
        // vectorizes.
        const int64_t count = stop - k * kBlock;
        uint16_t bits[kBlock];
        for (int64_t l = 0; l < count; ++l) bits[l] = t.payload_bf16[data[k * kBlock + l]];
        uint16_t* out = static_cast<uint16_t*>(p.out) + a * p.l + k * kBlock;
        if (count == kBlock) {
          for (int64_t l = 0; l < kBlock; ++l) out[l] = ShiftedBf16(bits[l], shift_field);
        } else {
          for (int64_t l = 0; l < count; ++l) out[l] = ShiftedBf16(bits[l], shift_field);
        }
        continue;
      }
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
