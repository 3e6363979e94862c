// Bit-exact conversions between the input float types (f32, f16, bf16) and the
// two FP8 formats (e4m3fn, e5m2).
//
// The rounding is integer arithmetic on IEEE bit patterns, and every float
// operation used (one in the f16 subnormal path) is exact, so the results do
// not depend on the FPU rounding mode, on flush-to-zero settings, or on
// compiler intrinsics: the same header gives the same bits on the host and on
// a CUDA device.
//
// Float -> FP8 rounding rules (the only ones this library uses):
//   * round to nearest, ties to even, including into FP8 subnormals;
//   * saturating: a magnitude above the largest finite FP8 value (also +-inf)
//     becomes +-max;
//   * NaN becomes the byte 0x7F (a positive NaN in both formats);
//   * the sign of zero (and of values that round to zero) is kept.

#ifndef EQX_QUANT_CSRC_COMMON_FP8_FORMAT_H_
#define EQX_QUANT_CSRC_COMMON_FP8_FORMAT_H_

#include <cstdint>
#include <cstring>

#include "common/host_device.h"

namespace eqx_quant {

// The FP8 element type of a quantized tensor.
enum class Fp8Format {
  kE4M3Fn,  // 1 sign, 4 exponent (bias 7), 3 mantissa bits; no inf; max 448.
  kE5M2,    // 1 sign, 5 exponent (bias 15), 2 mantissa bits; max 57344.
};

// Parameters of e4m3fn (the "fn" variant: only S.1111.111 is NaN).
struct E4M3Fn {
  static constexpr int kMantissaBits = 3;
  static constexpr int kExponentBias = 7;
  static constexpr uint32_t kMaxFiniteF32Bits = 0x43E00000u;  // 448.0f
  static constexpr uint8_t kMaxFiniteByte = 0x7E;             // 0.1111.110
};

// Parameters of e5m2 (IEEE-like: exponent 31 is inf/NaN).
struct E5M2 {
  static constexpr int kMantissaBits = 2;
  static constexpr int kExponentBias = 15;
  static constexpr uint32_t kMaxFiniteF32Bits = 0x47600000u;  // 57344.0f
  static constexpr uint8_t kMaxFiniteByte = 0x7B;             // 0.11110.11
};

// The byte every NaN input becomes, in both formats.
inline constexpr uint8_t kFp8NanByte = 0x7F;

EQX_QUANT_HOST_DEVICE inline uint32_t FloatToBits(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// Magnitude bits of an f32 with NaN mapped to 0. For non-negative floats the
// integer order of the bit patterns is the numeric order, so the max of these
// keys is the bit pattern of the NaN-ignoring max |x| (fmaxf semantics; 0 if
// none), exact for subnormals whatever the FPU's denormal mode. (Written with
// a mask, not a select: GCC 12 vectorises the max reduction only in this form.)
EQX_QUANT_HOST_DEVICE inline uint32_t AmaxKey(float value) {
  const uint32_t magnitude = FloatToBits(value) & 0x7FFFFFFFu;
  const uint32_t not_nan_mask =
      0u - static_cast<uint32_t>(magnitude <= 0x7F800000u);
  return magnitude & not_nan_mask;
}

EQX_QUANT_HOST_DEVICE inline float BitsToFloat(uint32_t bits) {
  float value;
  memcpy(&value, &bits, sizeof(value));
  return value;
}

// The largest finite value of `format`, as an f32.
EQX_QUANT_HOST_DEVICE inline float Fp8MaxFinite(Fp8Format format) {
  return BitsToFloat(format == Fp8Format::kE4M3Fn ? E4M3Fn::kMaxFiniteF32Bits
                                                  : E5M2::kMaxFiniteF32Bits);
}

// Current scaling (TE's compute_scale_from_amax with margin 0): fp8_max / amax
// as one IEEE f32 division where amax is positive and finite, else `fallback`.
// No epsilon, no clamp: a tiny amax gives an infinite scale. The division is
// correctly rounded on the host (with the FPU in IEEE mode) and on a device
// (nvcc's default -prec-div=true, no FTZ).
EQX_QUANT_HOST_DEVICE inline float ScaleFromAmax(float amax, float fallback,
                                                 Fp8Format format) {
  const uint32_t bits = FloatToBits(amax);
  const bool positive_finite = bits != 0u && bits < 0x7F800000u;
  return positive_finite ? Fp8MaxFinite(format) / amax : fallback;
}

// bfloat16 is the upper half of an f32: the conversion is a shift.
EQX_QUANT_HOST_DEVICE inline float Bf16BitsToFloat(uint16_t bits) {
  return BitsToFloat(static_cast<uint32_t>(bits) << 16);
}

// Exact IEEE binary16 -> binary32 conversion, including subnormals, infinities
// and NaN (the payload is kept and the NaN is made quiet). Branch-free.
EQX_QUANT_HOST_DEVICE inline float F16BitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  // Normal: rebias the exponent 15 -> 127.
  const uint32_t normal =
      sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  // Inf / NaN.
  const uint32_t quiet = mantissa != 0 ? 0x00400000u : 0u;
  const uint32_t inf_nan = sign | 0x7F800000u | quiet | (mantissa << 13);
  // Zero / subnormal: mantissa * 2^-24, exact (a <= 10-bit integer converts
  // exactly and the power-of-two product is a normal f32) in any rounding
  // mode.
  const uint32_t subnormal =
      sign | FloatToBits(static_cast<float>(static_cast<int32_t>(mantissa)) *
                         5.9604644775390625e-8f);
  const uint32_t result =
      exponent == 0x1Fu ? inf_nan : (exponent == 0 ? subnormal : normal);
  return BitsToFloat(result);
}

// Rounds a non-negative integer `value` right by `shift` bits (1 <= shift <=
// 31) with round-to-nearest-even.
EQX_QUANT_HOST_DEVICE inline uint32_t ShiftRightRoundNearestEven(uint32_t value,
                                                                 int shift) {
  const uint32_t half_minus_one = (1u << (shift - 1)) - 1u;
  const uint32_t odd = (value >> shift) & 1u;
  return (value + half_minus_one + odd) >> shift;
}

// f32 -> FP8 byte for the format described by `Format` (E4M3Fn or E5M2),
// following the rules at the top of this file.
//
// Written without data-dependent branches (both the normal and the subnormal
// candidate are computed and one is selected), so that a loop over it can be
// vectorised; the only per-element variable shift is in the subnormal
// candidate.
template <typename Format>
EQX_QUANT_HOST_DEVICE inline uint8_t FloatToFp8(float value) {
  constexpr int kDroppedBits = 23 - Format::kMantissaBits;
  // Smallest unbiased exponent of a normal FP8 number, and its f32 bits.
  constexpr int kMinNormalExponent = 1 - Format::kExponentBias;
  constexpr uint32_t kMinNormalF32Bits =
      static_cast<uint32_t>(kMinNormalExponent + 127) << 23;
  // Subtracting this from f32 bits rebiases the exponent field to FP8's.
  constexpr uint32_t kRebias =
      static_cast<uint32_t>(127 - Format::kExponentBias) << 23;

  const uint32_t bits = FloatToBits(value);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t magnitude = bits & 0x7FFFFFFFu;

  // Normal FP8 range: rebias the exponent in place and round the mantissa.
  // A rounding carry into the exponent is exactly the next FP8 binade; it
  // cannot reach the NaN/inf encodings below the max finite value.
  const uint32_t normal =
      ShiftRightRoundNearestEven(magnitude - kRebias, kDroppedBits);

  // Subnormal FP8 range (or zero): in units of the smallest FP8 subnormal,
  // 2^(kMinNormalExponent - kMantissaBits), the value is
  // significand * 2^-shift with the shift below. A rounding carry to
  // 2^kMantissaBits is the smallest normal's encoding. Shifts of 25 and more
  // (including all f32 subnormals, whose significand is < 2^24 here even
  // with the implicit bit) give 0, so the shift is clamped to 25.
  const uint32_t significand = (magnitude & 0x007FFFFFu) | 0x00800000u;
  const int exponent_field = static_cast<int>(magnitude >> 23);
  int shift = kDroppedBits + kMinNormalExponent + 127 - exponent_field;
  shift = shift > 25 ? 25 : shift;
  shift = shift < 1 ? 1 : shift;  // only for inputs that take `normal`
  const uint32_t subnormal = ShiftRightRoundNearestEven(significand, shift);

  uint32_t result = magnitude >= kMinNormalF32Bits ? normal : subnormal;
  result =
      magnitude >= Format::kMaxFiniteF32Bits ? Format::kMaxFiniteByte : result;
  result |= sign;
  result = magnitude > 0x7F800000u ? kFp8NanByte : result;
  return static_cast<uint8_t>(result);
}

EQX_QUANT_HOST_DEVICE inline uint8_t FloatToE4M3Fn(float value) {
  return FloatToFp8<E4M3Fn>(value);
}

EQX_QUANT_HOST_DEVICE inline uint8_t FloatToE5M2(float value) {
  return FloatToFp8<E5M2>(value);
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_FP8_FORMAT_H_
