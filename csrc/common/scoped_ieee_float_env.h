// RAII guard that puts the calling CPU thread's floating-point unit into plain
// IEEE-754 mode (round to nearest even, no flush-to-zero, no
// denormals-are-zero) and restores the previous mode on destruction.
//
// XLA's CPU runtime runs computations (and so FFI handlers) with FTZ/DAZ set,
// which would turn subnormal inputs, products and sums into zeros. The kernels
// here are specified bit-exactly with IEEE semantics, so the FFI layer wraps
// every kernel call in this guard. Put the guard in a different translation
// unit from the float arithmetic it protects, so the compiler cannot move that
// arithmetic across the mode switch.
//
// Host-only (x86-64 SSE and AArch64); a no-op elsewhere.

#ifndef EQX_QUANT_CSRC_COMMON_SCOPED_IEEE_FLOAT_ENV_H_
#define EQX_QUANT_CSRC_COMMON_SCOPED_IEEE_FLOAT_ENV_H_

#include <cstdint>

#if defined(__x86_64__) || defined(_M_X64) || defined(__SSE__)
#include <xmmintrin.h>
#define EQX_QUANT_FLOAT_ENV_SSE 1
#elif defined(__aarch64__)
#define EQX_QUANT_FLOAT_ENV_AARCH64 1
#endif

namespace eqx_quant {

class ScopedIeeeFloatEnv {
 public:
  ScopedIeeeFloatEnv() {
#if defined(EQX_QUANT_FLOAT_ENV_SSE)
    saved_ = _mm_getcsr();
    _mm_setcsr(static_cast<unsigned int>(
        saved_ &
        ~(kMxcsrFlushToZero | kMxcsrDenormalsAreZero | kMxcsrRoundingControl)));
#elif defined(EQX_QUANT_FLOAT_ENV_AARCH64)
    uint64_t fpcr;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
    saved_ = fpcr;
    fpcr &= ~(kFpcrFlushToZero | kFpcrRoundingMode);
    __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr));
#endif
  }

  ~ScopedIeeeFloatEnv() {
#if defined(EQX_QUANT_FLOAT_ENV_SSE)
    _mm_setcsr(static_cast<unsigned int>(saved_));
#elif defined(EQX_QUANT_FLOAT_ENV_AARCH64)
    __asm__ __volatile__("msr fpcr, %0" : : "r"(saved_));
#endif
  }

  ScopedIeeeFloatEnv(const ScopedIeeeFloatEnv&) = delete;
  ScopedIeeeFloatEnv& operator=(const ScopedIeeeFloatEnv&) = delete;

 private:
  static constexpr uint64_t kMxcsrDenormalsAreZero = 1u << 6;
  static constexpr uint64_t kMxcsrRoundingControl = 3u << 13;
  static constexpr uint64_t kMxcsrFlushToZero = 1u << 15;
  static constexpr uint64_t kFpcrRoundingMode = uint64_t{3} << 22;
  static constexpr uint64_t kFpcrFlushToZero = uint64_t{1} << 24;

  uint64_t saved_ = 0;
};

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_SCOPED_IEEE_FLOAT_ENV_H_
