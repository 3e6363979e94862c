// Host-side helpers shared by the CPU kernels: how each input element type
// widens to float (the amax key is AmaxKey in common/fp8_format.h).

#ifndef EQX_QUANT_CSRC_COMMON_CPU_INPUT_H_
#define EQX_QUANT_CSRC_COMMON_CPU_INPUT_H_

#include <cstdint>

#include "common/fp8_format.h"

namespace eqx_quant::cpu {

// Input element types: `Storage` is the element as stored, `ToFloat` its exact
// widening to float.
struct F32Input {
  using Storage = float;
  static float ToFloat(float value) { return value; }
};
struct F16Input {
  using Storage = uint16_t;
  static float ToFloat(uint16_t bits) { return F16BitsToFloat(bits); }
};
struct Bf16Input {
  using Storage = uint16_t;
  static float ToFloat(uint16_t bits) { return Bf16BitsToFloat(bits); }
};

}  // namespace eqx_quant::cpu

#endif  // EQX_QUANT_CSRC_COMMON_CPU_INPUT_H_
