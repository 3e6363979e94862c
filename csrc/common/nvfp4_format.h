// NVFP4 element and scale arithmetic (docs/block_formats.md, "NVFP4" and
// "Stochastic rounding"): E2M1 codes by round-to-nearest-even or by
// stochastic rounding, the E4M3 block scale byte and the per-block encode
// multiplier.
//
// The E2M1 encoders are integer arithmetic on IEEE bit patterns. The scale
// math uses IEEE binary32 multiplies and true divisions, which give the
// specified bits only with round-to-nearest and without flush-to-zero (on the
// host: run under common/scoped_ieee_float_env.h; on a CUDA device: IEEE
// division, no FMA contraction, no FTZ).

#ifndef EQX_QUANT_CSRC_COMMON_NVFP4_FORMAT_H_
#define EQX_QUANT_CSRC_COMMON_NVFP4_FORMAT_H_

#include <cstdint>

#include "common/fp8_format.h"

namespace eqx_quant {

inline constexpr int kNvfp4Block = 16;
inline constexpr uint32_t kF32MagnitudeMask = 0x7FFFFFFFu;
inline constexpr uint32_t kF32InfBits = 0x7F800000u;
inline constexpr uint32_t kF32MaxBits = 0x7F7FFFFFu;  // FLT_MAX
inline constexpr uint32_t kF32OneBits = 0x3F800000u;
inline constexpr uint32_t kF32RcpSixBits = 0x3E2AAAABu;  // fl(1/6)
inline constexpr float kGlobalEncodeNumerator = 2688.0f;  // 448 * 6, exact
// E2M1 has no NaN: a NaN element becomes +6 (code 0x7), as cuda_fp4.hpp does.
inline constexpr uint8_t kE2M1NanCode = 0x7;

// Saturating round-to-nearest-even f32 -> E2M1 code (0..15, sign at bit 3).
// The E2M1 magnitudes are 0, 0.5, 1, 1.5, 2, 3, 4, 6 (codes 0..7); the code
// is the number of rounding boundaries below |y|, where a tie goes to the
// even code (0.25 -> 0, 0.75 -> 2, 1.25 -> 2, 1.75 -> 4, 2.5 -> 4, 3.5 -> 6,
// 5 -> 6). |y| > 5 and inf give 7; the sign is kept (also for zero); NaN
// gives 0x7. Compares the magnitude bits, so it vectorises and is immune to
// denormals-are-zero.
EQX_QUANT_HOST_DEVICE inline uint8_t FloatToE2M1(float value) {
  const uint32_t bits = FloatToBits(value);
  // The magnitude is < 2^31: signed compares (one instruction per lane).
  const int32_t magnitude = static_cast<int32_t>(bits & kF32MagnitudeMask);
  const uint32_t sign = (bits >> 28) & 0x8u;
  int32_t code = magnitude > 0x3E800000;  // 0.25
  code += magnitude >= 0x3F400000;        // 0.75
  code += magnitude > 0x3FA00000;         // 1.25
  code += magnitude >= 0x3FE00000;        // 1.75
  code += magnitude > 0x40200000;         // 2.5
  code += magnitude >= 0x40600000;        // 3.5
  code += magnitude > 0x40A00000;         // 5
  const uint32_t result = static_cast<uint32_t>(code) | sign;
  return static_cast<uint8_t>(
      magnitude > static_cast<int32_t>(kF32InfBits) ? kE2M1NanCode : result);
}

// Stochastically rounded f32 -> E2M1 code with the random byte `r` (0..255).
// With a = |y| and the grid step of a's binade (0.5 below 2, 1 below 4, else
// 2), a = (n + frac) * step; the code rounds up iff (r + 1/2) * 2^-8 < frac,
// decided exactly in integers: iff (r << 16 | 0x8000) < ceil(frac * 2^24)
// (an integer is below a real x iff it is below ceil(x)). a >= 6 (and inf)
// gives magnitude code 7, NaN gives 0x7, the sign bit is kept (also for a
// zero result).
//
// Integer form: a = sig * 2^(e - 150) with e = max(exponent field, 1) and sig
// the significand with its implicit bit, so t = a / step = sig / 2^f with
// f = 150 + log2(step) - e >= 22 for a < 6; n = sig >> f, frac = sig mod 2^f
// and the threshold is ceil(frac / 2^(f - 24)). Shifts are clamped to [0, 31],
// which changes nothing because sig < 2^24 (and huge a saturate anyway).
// Branch-free (selects only), so a loop over it vectorises.
EQX_QUANT_HOST_DEVICE inline uint8_t FloatToE2M1Stochastic(float value,
                                                           uint32_t r) {
  const uint32_t bits = FloatToBits(value);
  const uint32_t magnitude = bits & kF32MagnitudeMask;
  const uint32_t sign = (bits >> 28) & 0x8u;
  const int exponent_field = static_cast<int>(magnitude >> 23);
  const uint32_t mantissa = magnitude & 0x7FFFFFu;
  const uint32_t sig = exponent_field == 0 ? mantissa : (mantissa | 0x800000u);
  const int e = exponent_field < 1 ? 1 : exponent_field;
  // log2(step): -1 below 2.0, 0 below 4.0, else 1.
  const int step_log2 =
      magnitude < 0x40000000u ? -1 : (magnitude < 0x40800000u ? 0 : 1);
  // Code of the grid point n * step: n, n + 2 or n + 4.
  const uint32_t code_offset = static_cast<uint32_t>(2 * (step_log2 + 1));
  const int f = 150 + step_log2 - e;
  // f < 0 only for a >= 2^104, whose code the a >= 6 select below overrides:
  // clamping to [0, 31] keeps every shift defined without changing a result.
  const int f_clamped = f > 31 ? 31 : (f < 0 ? 0 : f);
  const uint32_t n = sig >> f_clamped;
  const uint32_t frac = sig & ((1u << f_clamped) - 1u);
  const int shift = f - 24;  // >= -2
  const int right = shift > 31 ? 31 : (shift < 0 ? 0 : shift);
  const int left = shift < 0 ? (shift < -31 ? 31 : -shift) : 0;
  const uint32_t round_up_bit =
      (frac & ((1u << right) - 1u)) != 0 ? 1u : 0u;
  const uint32_t threshold =
      shift > 0 ? (frac >> right) + round_up_bit : (frac << left);
  const uint32_t up = ((r << 16) | 0x8000u) < threshold ? 1u : 0u;
  uint32_t code = n + up + code_offset;
  code = magnitude >= 0x40C00000u ? 7u : code;  // a >= 6, inf
  code |= sign;
  code = magnitude > kF32InfBits ? kE2M1NanCode : code;
  return static_cast<uint8_t>(code);
}

// f32 value of an E2M1 code (0, 0.5, 1, 1.5, 2, 3, 4, 6; sign at bit 3),
// exact, built from its bits (an indexed constant table would live in a GPU's
// local memory).
EQX_QUANT_HOST_DEVICE inline float E2M1ToFloat(uint32_t code) {
  const uint32_t e = (code >> 1) & 3u;
  const uint32_t m = code & 1u;
  const uint32_t magnitude = e != 0 ? ((126u + e) << 23) | (m << 22) : m * 0x3F000000u;
  return BitsToFloat(((code & 8u) << 28) | magnitude);
}

// f32 value of an E4M3 (fn) byte; 0x7F / 0xFF are NaN. Exact.
EQX_QUANT_HOST_DEVICE inline float E4M3ToFloat(uint8_t byte) {
  const uint32_t sign = static_cast<uint32_t>(byte & 0x80u) << 24;
  const uint32_t exponent = (byte >> 3) & 0xFu;
  const uint32_t mantissa = byte & 0x7u;
  // Normal: rebias 7 -> 127. Subnormal: mantissa * 2^-9 (the product is
  // exact and normal in f32).
  const uint32_t normal = sign | ((exponent + 120u) << 23) | (mantissa << 20);
  const uint32_t subnormal =
      sign | FloatToBits(static_cast<float>(static_cast<int32_t>(mantissa)) *
                         0.001953125f);
  uint32_t result = exponent == 0 ? subnormal : normal;
  result = (byte & 0x7Fu) == 0x7Fu ? 0x7FC00000u : result;
  return BitsToFloat(result);
}

// The per-tensor quantities of one NVFP4 part, from its global amax amax_g:
//   s_enc  = fminf(fl(2688 / amax_g), FLT_MAX), 1 if amax_g == 0 or that
//            quotient is 0 (amax_g = inf); a NaN quotient gives FLT_MAX;
//   factor = fl(s_enc * fl(1/6))   (block amax -> scale multiplier)
//   s_dec  = fl(1 / s_enc)
struct Nvfp4TensorScale {
  float s_enc;
  float factor;
  float s_dec;
};

EQX_QUANT_HOST_DEVICE inline Nvfp4TensorScale MakeNvfp4TensorScale(
    float amax_g) {
  uint32_t s = FloatToBits(kGlobalEncodeNumerator / amax_g);
  const bool s_nan = (s & kF32MagnitudeMask) > kF32InfBits;
  s = (s_nan || s == kF32InfBits) ? kF32MaxBits : s;
  const bool amax_zero = (FloatToBits(amax_g) & kF32MagnitudeMask) == 0;
  s = (amax_zero || (s & kF32MagnitudeMask) == 0) ? kF32OneBits : s;
  Nvfp4TensorScale scale;
  scale.s_enc = BitsToFloat(s);
  scale.factor = scale.s_enc * BitsToFloat(kF32RcpSixBits);
  scale.s_dec = 1.0f / scale.s_enc;
  return scale;
}

// The stored E4M3 scale byte of a block: e4m3_RN_sat(fl(block_amax * factor)).
EQX_QUANT_HOST_DEVICE inline uint8_t Nvfp4ScaleByte(float block_amax,
                                                    const Nvfp4TensorScale& t) {
  return FloatToFp8<E4M3Fn>(block_amax * t.factor);
}

// The element multiplier of a block with scale byte `sdb`:
// fl(1 / fl(float(sdb) * s_dec)), capped at FLT_MAX by an unsigned compare of
// the bit patterns (an infinite or NaN quotient, e.g. of a zero block, gives
// FLT_MAX, as does any quotient with the sign bit set).
EQX_QUANT_HOST_DEVICE inline float Nvfp4EncodeMultiplier(
    uint8_t sdb, const Nvfp4TensorScale& t) {
  const float denominator = E4M3ToFloat(sdb) * t.s_dec;
  const uint32_t enc = FloatToBits(1.0f / denominator);
  return BitsToFloat(enc < kF32MaxBits ? enc : kF32MaxBits);
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_NVFP4_FORMAT_H_
