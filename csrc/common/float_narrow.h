// Bit-exact f32 -> bf16 / f16 conversions (the casts of `y.astype(dtype)` in
// XLA on the CPU) with NaN canonical: round to nearest, ties to even, into
// subnormals, overflow to +-inf, the sign of zero kept, and every NaN written
// as the dtype's positive quiet NaN (bf16 0x7FC0, f16 0x7E00; the reference's
// cast_canonical). Integer arithmetic on the bits only, so the host and a
// CUDA device give the same bits.

#ifndef EQX_QUANT_CSRC_COMMON_FLOAT_NARROW_H_
#define EQX_QUANT_CSRC_COMMON_FLOAT_NARROW_H_

#include <cstdint>

#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"

namespace eqx_quant {

inline constexpr uint16_t kBf16CanonicalNan = 0x7FC0;
inline constexpr uint16_t kF16CanonicalNan = 0x7E00;

EQX_QUANT_HOST_DEVICE inline uint16_t FloatToBf16Bits(float value) {
  const uint32_t bits = FloatToBits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return kBf16CanonicalNan;
  // Adding 0x7FFF plus the kept lowest bit rounds to nearest even; a carry
  // into the exponent is the correct next binade (or inf).
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

EQX_QUANT_HOST_DEVICE inline uint16_t FloatToF16Bits(float value) {
  const uint32_t bits = FloatToBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return kF16CanonicalNan;
  // 65520 = 65504 + half an ulp rounds (to even) up to inf.
  if (magnitude >= 0x477FF000u) return sign | 0x7C00u;
  if (magnitude >= 0x38800000u) {  // >= 2^-14: an f16 normal
    // Rebias the exponent (127 -> 15) and drop 13 mantissa bits.
    const uint32_t half = (magnitude >> 13) - (uint32_t{112} << 10);
    const uint32_t rest = magnitude & 0x1FFFu;
    const uint32_t up =
        rest > 0x1000u || (rest == 0x1000u && (half & 1u) != 0) ? 1u : 0u;
    return static_cast<uint16_t>(sign | (half + up));
  }
  // An f16 subnormal (or zero): the value in units of 2^-24 is
  // m * 2^(e - 126) for the 24-bit significand m of biased exponent e.
  const uint32_t exponent = magnitude >> 23;
  const int shift = 126 - static_cast<int>(exponent);  // >= 14 here
  if (exponent == 0 || shift > 24) return sign;  // below 2^-25 (ties too)
  const uint32_t m = (magnitude & 0x7FFFFFu) | 0x800000u;
  const uint32_t q = m >> shift;
  const uint32_t rest = m & ((uint32_t{1} << shift) - 1u);
  const uint32_t tie = uint32_t{1} << (shift - 1);
  const uint32_t up = rest > tie || (rest == tie && (q & 1u) != 0) ? 1u : 0u;
  return static_cast<uint16_t>(sign | (q + up));
}

// out[i] := value in `type` (f32 keeps the bits but makes NaN canonical,
// 0x7FC00000).
EQX_QUANT_HOST_DEVICE inline void StoreNarrowed(InputType type, void* out,
                                                int64_t i, float value) {
  switch (type) {
    case InputType::kBF16:
      static_cast<uint16_t*>(out)[i] = FloatToBf16Bits(value);
      return;
    case InputType::kF16:
      static_cast<uint16_t*>(out)[i] = FloatToF16Bits(value);
      return;
    case InputType::kF32:
      static_cast<float*>(out)[i] =
          (FloatToBits(value) & 0x7FFFFFFFu) > 0x7F800000u
              ? BitsToFloat(0x7FC00000u)
              : value;
      return;
  }
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_FLOAT_NARROW_H_
