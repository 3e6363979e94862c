// The store of the dequantize kernels: 8 consecutive float32 values, written
// at element `first` of a float32 or bfloat16 (rounded to nearest even, NaN
// quiet) buffer, as 16-byte stores when all 8 lie inside it (`count` == 8),
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
    if (count == 8) {
      reinterpret_cast<float4*>(out)[0] = make_float4(values[0], values[1], values[2], values[3]);
      reinterpret_cast<float4*>(out)[1] = make_float4(values[4], values[5], values[6], values[7]);
    } else {
      for (int t = 0; t < count; ++t) out[t] = values[t];
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
      for (int t = 0; t < count; ++t) out[t] = bits[t];
    }
  }
}

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_CUDA_STORE_VALUES_CUDA_CUH_
