// The hardware f32 -> FP8 convert, the streaming load of the input and the
// streaming stores of the outputs, shared by the FP8, MXFP8 and grouped CUDA
// kernels. Included by .cu files only.

#ifndef EQX_QUANT_CSRC_CUDA_FP8_CONVERT_CUH_
#define EQX_QUANT_CSRC_CUDA_FP8_CONVERT_CUH_

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

// A streaming 16-byte load of read-only data (not kept in L1).
__device__ __forceinline__ uint4 LoadStreaming(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

// Outputs go to global memory with streaming stores (st.global.cs: evict
// first from L1 and L2). A quantize kernel never reads its outputs back, and
// ordinary stores leave them in L2 as dirty lines that push out input still to
// be read (benchmarks/probes/stream_cast.cu). Global memory only;
// shared-memory staging uses StageCastWords.

// kWords words of converted FP8 bytes (2: 8 elements of a bf16 / f16 vector,
// 1: 4 of an f32 one) to global dst, aligned to their size: one 8- or 4-byte
// streaming store.
template <int kWords>
__device__ __forceinline__ void StoreCastWords(void* dst,
                                               const uint32_t (&q)[kWords]) {
  // No "memory" clobber (unlike __stcs): nothing in a kernel reads these
  // bytes back, and the clobber costs registers (spills in the walk kernel).
  if constexpr (kWords == 2) {
    asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(dst), "r"(q[0]),
                 "r"(q[1]));
  } else {
    static_assert(kWords == 1, "8 or 4 elements per 16-byte vector");
    asm volatile("st.global.cs.u32 [%0], %1;" ::"l"(dst), "r"(q[0]));
  }
}

// 16 output bytes to global dst (16-byte aligned): one streaming store.
__device__ __forceinline__ void StoreStreaming16(void* dst, uint4 value) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst),
               "r"(value.x), "r"(value.y), "r"(value.z), "r"(value.w));
}

// StoreCastWords' words to shared memory (a staging tile).
template <int kWords>
__device__ __forceinline__ void StageCastWords(void* dst,
                                               const uint32_t (&q)[kWords]) {
  if constexpr (kWords == 2) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(q[0], q[1]);
  } else {
    static_assert(kWords == 1, "8 or 4 elements per 16-byte vector");
    *reinterpret_cast<uint32_t*>(dst) = q[0];
  }
}

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_CUDA_FP8_CONVERT_CUH_
