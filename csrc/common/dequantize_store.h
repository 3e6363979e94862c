// The stored values of the CPU dequantize kernels: float32 with every NaN as
// the quiet NaN 0x7FC00000, or bfloat16 bits rounded to nearest even with
// every NaN as 0x7FC0 (the pure-JAX path's NaNs; x86 arithmetic would keep an
// operand's NaN, or return its own default NaN, 0xFFC00000).

#ifndef EQX_QUANT_CSRC_COMMON_DEQUANTIZE_STORE_H_
#define EQX_QUANT_CSRC_COMMON_DEQUANTIZE_STORE_H_

#include <cstdint>
#include <type_traits>

#include "common/mx_decode.h"

namespace eqx_quant {

template <bool kF32>
using StoredValue = std::conditional_t<kF32, float, uint16_t>;

template <bool kF32>
inline StoredValue<kF32> Stored(float value) {
  if constexpr (kF32) {
    return value != value ? BitsToFloat(0x7FC00000u) : value;
  } else {
    return ToBf16Bits(value);
  }
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_DEQUANTIZE_STORE_H_
