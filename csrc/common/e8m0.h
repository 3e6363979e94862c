// E8M0 scale bytes (the power-of-two scales of the MX formats) and the MXFP8
// block-scale rule of docs/block_formats.md:
//
//   v = fl(block_amax * fl(1/fp8_max))
//   E = e8m0_round_up(v)
//   q = fp8_RN_sat(fl(x * 2^(127-E)))
//
// E8M0 is an 8-bit biased exponent: byte E stands for 2^(E-127); 0xFF is NaN.
// Apart from the two float multiplies of the rule (one per block for v, one
// per element for q, both done by the caller), everything here is integer
// arithmetic on IEEE bit patterns, so it gives the same bytes on the host and
// on a CUDA device. The multiplies must run with IEEE subnormals (no
// flush-to-zero): see common/scoped_ieee_float_env.h.

#ifndef EQX_QUANT_CSRC_COMMON_E8M0_H_
#define EQX_QUANT_CSRC_COMMON_E8M0_H_

#include <cstdint>

#include "common/fp8_format.h"

namespace eqx_quant {

// The E8M0 byte that stands for NaN.
inline constexpr uint8_t kE8m0NanByte = 0xFF;

// The E8M0 byte of a non-negative f32 `v`, rounded toward +inf to a power of
// two (TE's e8m0 rounding): with e, m the exponent and mantissa fields of v,
// E = e + 1 if m > 0, e != 0xFE and not (e == 0 and m <= 2^22), else e.
// So 0 -> 0x00, a subnormal v <= 2^-127 -> 0x00, v in (2^-127, 2^-126) ->
// 0x01, values above 2^127 saturate at 0xFE, +inf -> 0xFE and NaN -> 0xFF.
// The sign bit of `v` is ignored.
EQX_QUANT_HOST_DEVICE inline uint8_t E8m0RoundUp(float v) {
  const uint32_t bits = FloatToBits(v);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  const uint32_t exponent = magnitude >> 23;
  const uint32_t mantissa = magnitude & 0x007FFFFFu;
  // Byte 0x00 stands for 2^-127: a subnormal v <= 2^-127 stays there.
  const bool tiny = exponent == 0 && mantissa <= 0x00400000u;
  const bool up = mantissa != 0 && exponent != 0xFEu && !tiny;
  uint32_t result = exponent + (up ? 1u : 0u);
  result = magnitude == 0x7F800000u ? 0xFEu : result;
  result = magnitude > 0x7F800000u ? kE8m0NanByte : result;
  return static_cast<uint8_t>(result);
}

// E8m0RoundUp(v) for a v that is neither NaN nor negative (sign bit clear:
// the CUDA kernels' block amaxes, built from magnitude bits with NaN
// dropped), in a third of the operations, as a 32-bit value: v <= 2^-127
// (bits <= 0x00400000) gives 0; otherwise adding 0x007FFFFF to the bits
// carries into the exponent exactly when the mantissa is nonzero, and the
// sum's exponent field saturates at 0xFE (a carry out of 0xFE, and +inf).
// Equal to E8m0RoundUp on all 2^31 - 2^23 + 1 such inputs
// (tests/e8m0_test.cc).
EQX_QUANT_HOST_DEVICE inline uint32_t E8m0RoundUpNonNegative(float v) {
  const uint32_t bits = FloatToBits(v);
  const uint32_t up = (bits + 0x007FFFFFu) >> 23;
  const uint32_t result = up < 0xFEu ? up : 0xFEu;
  return bits <= 0x00400000u ? 0u : result;
}
// E8m0ReciprocalScale(e) for e <= 0xFE (== on all 255 such bytes).
EQX_QUANT_HOST_DEVICE inline float E8m0ReciprocalScaleNotNan(uint32_t e) {
  const uint32_t bits = (254u - e) << 23;
  return BitsToFloat(e == 0xFEu ? 0x00400000u : bits);
}

// 2^(127-E) as an f32: the factor that scales a block's elements into the FP8
// range (the inverse of the block's scale 2^(E-127)). Exact for every E in
// [0, 0xFE]: 2^127 down to 2^-127, which is the f32 subnormal 0x00400000.
// The NaN byte 0xFF gives NaN, so every element of such a block becomes the
// FP8 NaN byte, as the reference specifies.
EQX_QUANT_HOST_DEVICE inline float E8m0ReciprocalScale(uint8_t e) {
  const uint32_t biased = 254u - static_cast<uint32_t>(e);  // 127 + (127 - E)
  uint32_t bits = biased << 23;
  bits = e == 0xFEu ? 0x00400000u : bits;
  bits = e == kE8m0NanByte ? 0x7FC00000u : bits;
  return BitsToFloat(bits);
}

// fl(1 / fp8_max) of each FP8 format: 1/448 and 1/57344 are not exact in f32;
// these are the correctly rounded f32 reciprocals (0x3B124925, 0x37924925)
// that the kernels multiply by.
template <typename Format>
struct Fp8MaxReciprocal;

template <>
struct Fp8MaxReciprocal<E4M3Fn> {
  static constexpr float kValue = 1.0f / 448.0f;
};

template <>
struct Fp8MaxReciprocal<E5M2> {
  static constexpr float kValue = 1.0f / 57344.0f;
};

// The E8M0 scale byte of an MXFP8 block whose NaN-ignoring max |x| is
// `block_amax` (0 for a block of zeros or NaNs only), for FP8 format
// `Format`.
template <typename Format>
EQX_QUANT_HOST_DEVICE inline uint8_t Mxfp8BlockScale(float block_amax) {
  return E8m0RoundUp(block_amax * Fp8MaxReciprocal<Format>::kValue);
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_E8M0_H_
