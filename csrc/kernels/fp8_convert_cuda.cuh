// The hardware f32 -> FP8 convert (and the store of its bytes) shared by the FP8, MXFP8 and grouped CUDA
// kernels. Included by .cu files only.

#ifndef EQX_QUANT_CSRC_KERNELS_FP8_CONVERT_CUDA_CUH_
#define EQX_QUANT_CSRC_KERNELS_FP8_CONVERT_CUDA_CUH_

#include <cstdint>

#include "common/fp8_format.h"

namespace eqx_quant::cuda {

// Two f32 -> two FP8 bytes (lo in the low byte), saturating RNE, NaN -> 0x7F
// (cvt.rn.satfinite; == fp8_format.h's FloatToFp8 on every f32, checked on
// the GPU by EqxQuantCudaFp8ConvertSelfTest).
template <Fp8Format kFormat>
__device__ __forceinline__ uint32_t CvtPair(float lo, float hi) {
  uint16_t packed;
  if constexpr (kFormat == Fp8Format::kE4M3Fn) {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
        : "=h"(packed)
        : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;"
        : "=h"(packed)
        : "f"(hi), "f"(lo));
  }
  return packed;
}

// kWords words of converted FP8 bytes (2: 8 elements of a bf16 / f16 vector,
// 1: 4 of an f32 one) to dst, aligned to their size: one 8- or 4-byte store.
template <int kWords>
__device__ __forceinline__ void StoreCastWords(void* dst,
                                               const uint32_t (&q)[kWords]) {
  if constexpr (kWords == 2) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(q[0], q[1]);
  } else {
    static_assert(kWords == 1, "8 or 4 elements per 16-byte vector");
    *reinterpret_cast<uint32_t*>(dst) = q[0];
  }
}

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_KERNELS_FP8_CONVERT_CUDA_CUH_
