// Division of integers below 2^31 by a divisor fixed at launch, with one
// multiply-high, an add and a shift instead of the ~20-instruction 32-bit
// division sequence (Granlund and Montgomery, "Division by invariant integers
// using multiplication", 1994, Theorem 4.2 with N = 32): for 1 <= d < 2^31,
// l = ceil(log2(d)) and magic = floor(2^32 (2^l - d) / d) + 1 (below 2^32, as
// 2^l < 2d), 2^32 + magic is floor(2^(32 + l) / d) + 1, so
//   n / d == floor(n (2^32 + magic) / 2^(32 + l))
//         == (floor(n magic / 2^32) + n) >> l   for 0 <= n < 2^32,
// and for n < 2^31 the sum stays below 2^32. Tested by
// csrc/tests/magic_division_test.cc.

#ifndef EQX_QUANT_CSRC_COMMON_MAGIC_DIVISION_H_
#define EQX_QUANT_CSRC_COMMON_MAGIC_DIVISION_H_

#include <cstdint>

#include "common/ceil_log2.h"
#include "common/host_device.h"

namespace eqx_quant {

struct MagicDivisor {
  uint32_t magic = 0;  // floor(2^32 (2^shift - d) / d) + 1
  int shift = 0;       // ceil(log2(d))
};

// The divisor d (1 <= d < 2^31).
inline MagicDivisor MakeMagicDivisor(uint32_t d) {
  const int shift = CeilLog2(d);
  const uint64_t magic =
      ((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1;
  return MagicDivisor{static_cast<uint32_t>(magic), shift};
}

// n / d for 0 <= n < 2^31.
EQX_QUANT_HOST_DEVICE inline uint32_t MagicQuotient(uint32_t n,
                                                    MagicDivisor d) {
#if defined(__CUDA_ARCH__)
  const uint32_t high = __umulhi(n, d.magic);
#else
  const uint32_t high = static_cast<uint32_t>((uint64_t{n} * d.magic) >> 32);
#endif
  return (high + n) >> d.shift;
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_MAGIC_DIVISION_H_
