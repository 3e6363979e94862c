// The MXFP8 block decode of the CPU dequantize kernels (dense:
// mxfp8/dequantize_cpu.cc, grouped: grouped/dequantize_cpu.cc): per-call
// tables of the payload and scale values, and one block of up to 32 payloads
// sharing a scale byte to bfloat16. Blocks whose scale keeps every product a
// normal number take a shorter path: the payload's bfloat16 bits (exact: FP8
// has fewer significand bits) with the scale's exponent added, which is that
// product rounded to bfloat16 exactly. Bit for bit common/mx_decode.h's
// ToBf16Bits(Fp8Value(byte) * E8m0Value(scale)). Host-only, no XLA types.

#ifndef EQX_QUANT_CSRC_MXFP8_DEQUANTIZE_BLOCK_CPU_H_
#define EQX_QUANT_CSRC_MXFP8_DEQUANTIZE_BLOCK_CPU_H_

#include <cstdint>

#include "common/fp8_format.h"
#include "common/mx_decode.h"

namespace eqx_quant::cpu {

inline constexpr int64_t kMxfp8DecodeBlock = 32;

struct Mxfp8DecodeTables {
  float payload[256];
  float scale[256];
  uint16_t payload_bf16[256];  // exact; NaN as 0x7FC0
  // The E8M0 bytes whose 2^(e - 127) times any finite nonzero payload is a
  // normal float32 (and bfloat16) number.
  uint32_t exact_shift_lo = 0;
  uint32_t exact_shift_hi = 0;
};

template <typename Format>
void FillMxfp8DecodeTables(Mxfp8DecodeTables& t) {
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

inline void FillMxfp8DecodeTables(Fp8Format format, Mxfp8DecodeTables& t) {
  if (format == Fp8Format::kE4M3Fn) {
    FillMxfp8DecodeTables<E4M3Fn>(t);
  } else {
    FillMxfp8DecodeTables<E5M2>(t);
  }
}

// bfloat16 bits of payload x 2^shift for a block whose scale byte is in the
// exact range: zeros, infinities and NaN (0x7FC0) are unchanged, every other
// value gets `shift` added to its exponent field.
inline uint16_t ShiftedBf16(uint16_t bits, uint16_t shift_field) {
  const bool unchanged = (bits & 0x7FFFu) == 0 || (bits & 0x7F80u) == 0x7F80u;
  return unchanged ? bits : static_cast<uint16_t>(bits + shift_field);
}

// out[0, count) = the bfloat16 values of data[0, count) (count <= 32) with
// the E8M0 scale byte `e`.
inline void DecodeMxfp8BlockBf16(const uint8_t* data, int64_t count, uint8_t e,
                                 const Mxfp8DecodeTables& t, uint16_t* out) {
  if (e < t.exact_shift_lo || e > t.exact_shift_hi) {
    const float scale = t.scale[e];
    for (int64_t l = 0; l < count; ++l) out[l] = ToBf16Bits(t.payload[data[l]] * scale);
    return;
  }
  // (e - 127) << 7, modulo 2^16: the exponent stays in range. The look-ups
  // first, then the shift in a loop the compiler vectorizes (a whole block has
  // a constant trip count).
  const auto shift_field = static_cast<uint16_t>((e - 127u) << 7);
  uint16_t bits[kMxfp8DecodeBlock];
  for (int64_t l = 0; l < count; ++l) bits[l] = t.payload_bf16[data[l]];
  if (count == kMxfp8DecodeBlock) {
    for (int64_t l = 0; l < kMxfp8DecodeBlock; ++l) out[l] = ShiftedBf16(bits[l], shift_field);
  } else {
    for (int64_t l = 0; l < count; ++l) out[l] = ShiftedBf16(bits[l], shift_field);
  }
}

}  // namespace eqx_quant::cpu

#endif  // EQX_QUANT_CSRC_MXFP8_DEQUANTIZE_BLOCK_CPU_H_
