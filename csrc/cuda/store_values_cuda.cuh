// The store of the dequantize kernels: 8 consecutive float32 values, written
// at element `first` of a float32 or bfloat16 (rounded to nearest even) buffer,
// every NaN as the quiet NaN of the pure-JAX path (a GPU's arithmetic returns
// its own canonical NaN, 0x7FFFFFFF), as 16-byte stores when all 8 lie inside it (`count` == 8),
// element by element at its end.

#ifndef EQX_QUANT_CSRC_CUDA_STORE_VALUES_CUDA_CUH_
#define EQX_QUANT_CSRC_CUDA_STORE_VALUES_CUDA_CUH_

#include <cstdint>
#include <cstring>

#include "common/mx_decode.h"

namespace eqx_quant::cuda {

template <bool kF32>
__device__ inline void StoreEight(void* buffer, int64_t first, const float (&values)[8],
                                  int count) {
  if constexpr (kF32) {
    float* out = static_cast<float*>(buffer) + first;
    float v[8];
    for (int t = 0; t < 8; ++t) v[t] = values[t] != values[t] ? BitsToFloat(0x7FC00000u) : values[t];
    if (count == 8) {
      reinterpret_cast<float4*>(out)[0] = make_float4(v[0], v[1], v[2], v[3]);
      reinterpret_cast<float4*>(out)[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
      for (int t = 0; t < 8; ++t) {  // static indices: the arrays stay in registers
        if (t < count) out[t] = v[t];
      }
    }
  } else {
    uint16_t* out = static_cast<uint16_t*>(buffer) + first;
    uint16_t bits[8];
    for (int t = 0; t < 8; ++t) bits[t] = ToBf16Bits(values[t]);
    if (count == 8) {
      uint4 packed;
      memcpy(&packed, bits, sizeof(packed));
      *reinterpret_cast<uint4*>(out) = packed;
    } else {
      for (int t = 0; t < 8; ++t) {
        if (t < count) out[t] = bits[t];
      }
    }
  }
}

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_CUDA_STORE_VALUES_CUDA_CUH_
