// MXFP8 decoding, shared by the dequantize kernels (dense and grouped): an FP8
// payload's value, an E8M0 scale's value, and float32 -> bfloat16 rounding,
// bit-exact with the pure-JAX dequantize (eqx_quant/reference/mxfp8.py).
// Every float operation is exact or correctly rounded without FTZ, so host and
// device give the same bits.

#ifndef EQX_QUANT_CSRC_COMMON_MX_DECODE_H_
#define EQX_QUANT_CSRC_COMMON_MX_DECODE_H_

#include <cstdint>

#include "common/fp8_format.h"
#include "common/host_device.h"

namespace eqx_quant {

// bfloat16's quiet NaN, which every NaN result becomes.
inline constexpr uint16_t kBf16QuietNan = 0x7FC0;

// An FP8 byte's value (exact in float32); NaN bytes give a quiet NaN.
template <typename Format>
EQX_QUANT_HOST_DEVICE inline float Fp8Value(uint32_t byte) {
  constexpr int kMan = Format::kMantissaBits;
  constexpr int kExpBits = 7 - kMan;
  constexpr int kBias = Format::kExponentBias;
  const uint32_t sign = (byte >> 7) << 31;
  const uint32_t exp = (byte >> kMan) & ((1u << kExpBits) - 1);
  const uint32_t man = byte & ((1u << kMan) - 1);
  const bool is_e4m3 = kMan == 3;
  const bool nan = is_e4m3 ? (exp == 15 && man == 7) : (exp == 31 && man != 0);
  const bool inf = !is_e4m3 && exp == 31 && man == 0;
  float magnitude;
  if (exp == 0) {  // subnormal: man * 2^(1 - bias - kMan), exact
    magnitude = static_cast<float>(man) *
                BitsToFloat(static_cast<uint32_t>(127 + 1 - kBias - kMan) << 23);
  } else {
    magnitude = BitsToFloat(((exp - kBias + 127) << 23) | (man << (23 - kMan)));
  }
  uint32_t bits = FloatToBits(magnitude) | sign;
  if (inf) bits = sign | 0x7F800000u;
  if (nan) bits = 0x7FC00000u;
  return BitsToFloat(bits);
}

// 2^(e - 127) for an E8M0 byte (2^-127 is a float32 subnormal); NaN for 0xFF.
EQX_QUANT_HOST_DEVICE inline float E8m0Value(uint32_t e) {
  if (e == 0xFF) return BitsToFloat(0x7FC00000u);
  return BitsToFloat(e == 0 ? 0x00400000u : e << 23);
}

// Round to nearest even float32 -> bfloat16 bits; NaN as kBf16QuietNan.
EQX_QUANT_HOST_DEVICE inline uint16_t ToBf16Bits(float value) {
  const uint32_t bits = FloatToBits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return kBf16QuietNan;
  const uint32_t rounded = bits + 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_MX_DECODE_H_
