// The store of the CPU dequantize kernels: one float32 value written to a
// float32 or bfloat16 (rounded to nearest even) buffer, every NaN as the
// quiet NaN of the pure-JAX path (x86 arithmetic would keep an operand's NaN,
// or return its own default NaN, 0xFFC00000).

#ifndef EQX_QUANT_CSRC_COMMON_DEQUANTIZE_STORE_H_
#define EQX_QUANT_CSRC_COMMON_DEQUANTIZE_STORE_H_

#include <cstdint>

#include "common/mx_decode.h"

namespace eqx_quant {

template <bool kF32>
inline void StoreValue(void* out, int64_t index, float value) {
  if constexpr (kF32) {
    static_cast<float*>(out)[index] = value != value ? BitsToFloat(0x7FC00000u) : value;
  } else {
    static_cast<uint16_t*>(out)[index] = ToBf16Bits(value);
  }
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_DEQUANTIZE_STORE_H_
