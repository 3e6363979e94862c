// A correctly rounded IEEE binary32 reciprocal in integer arithmetic (round
// to nearest even, subnormal inputs and results, +-0 -> +-inf, +-inf -> +-0,
// NaN -> the quiet NaN 0x7FC00000), for the grouped FP8 kernel's scale_inv
// (grouped/quantize_cuda.cu): the device's IEEE reciprocal has a
// slow path that is a subroutine call, and a call in a kernel makes ptxas
// spill registers of the tile code. This one is integer code without
// divisions or calls. Host/device, so that a host
// program can compare it with `1.0f / x` on every float.

#ifndef EQX_QUANT_CSRC_GROUPED_RCP_CUDA_CUH_
#define EQX_QUANT_CSRC_GROUPED_RCP_CUDA_CUH_

#include <cstdint>

#include "common/fp8_format.h"  // FloatToBits, BitsToFloat
#include "common/host_device.h"

namespace eqx_quant::grouped_rcp {

// fl(1 / x), NaN canonical (0x7FC00000).
EQX_QUANT_HOST_DEVICE inline float ExactReciprocal(float x) {
  const uint32_t bits = FloatToBits(x);
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return BitsToFloat(0x7FC00000u);  // NaN
  if (magnitude == 0x7F800000u) return BitsToFloat(sign);         // 1/inf
  if (magnitude == 0) return BitsToFloat(sign | 0x7F800000u);     // 1/0
  // |x| = m * 2^e with the integer significand m in [2^23, 2^24).
  uint32_t m = magnitude & 0x007FFFFFu;
  int e;
  if ((magnitude >> 23) != 0) {
    m |= 0x00800000u;
    e = static_cast<int>(magnitude >> 23) - 150;
  } else {  // subnormal: normalise
    e = -149;
    while ((m & 0x00800000u) == 0) {
      m <<= 1;
      --e;
    }
  }
  // q = floor(2^50 / m) in (2^26, 2^27], by restoring binary long division
  // (no divide instruction: ptxas turns those into subroutine calls); r != 0
  // <=> 2^50 / m is inexact.
  uint32_t q = (1u << 24) >= 2 * m ? 2u : 1u;  // floor(2^24 / m)
  uint32_t r = (1u << 24) - q * m;              // < m < 2^24
  for (int step = 0; step < 26; ++step) {       // 24 + 26 = 50
    r <<= 1;
    const uint32_t bit = r >= m ? 1u : 0u;
    r -= bit * m;
    q = (q << 1) | bit;
  }
  // |1/x| = (q + r/m) * 2^p, p = -50 - e. With L = bit length of q (27 or
  // 28), the value's binary exponent is L - 1 + p.
  const int p = -50 - e;
  const int length = q >= (1u << 27) ? 28 : 27;
  const int exponent = length - 1 + p;
  if (exponent > 127) return BitsToFloat(sign | 0x7F800000u);
  // Keep 24 significant bits, or fewer for a subnormal result (whose last
  // bit is 2^-149).
  const int shift = exponent >= -126 ? length - 24 : -149 - p;  // >= 3
  if (shift >= 32) return BitsToFloat(sign);  // below half of 2^-149
  const uint32_t kept = q >> shift;
  const uint32_t rest = q & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  const bool up =
      rest > half || (rest == half && (r != 0 || (kept & 1u) != 0));
  const uint32_t rounded = kept + (up ? 1u : 0u);
  uint32_t result;
  if (exponent >= -126) {
    // rounded in [2^23, 2^24]; 2^24 carries into the exponent.
    result = (static_cast<uint32_t>(exponent + 127) << 23) + rounded -
             0x00800000u;
    if (result >= 0x7F800000u) result = 0x7F800000u;
  } else {
    result = rounded;  // 2^23 is the smallest normal: right as it is
  }
  return BitsToFloat(sign | result);
}

}  // namespace eqx_quant::grouped_rcp

#endif  // EQX_QUANT_CSRC_GROUPED_RCP_CUDA_CUH_
