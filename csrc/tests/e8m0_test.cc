// Host unit test of the short E8M0 forms of common/e8m0.h that the MXFP8 CUDA
// kernels use (their block amaxes are never NaN). Not part of the library;
// tests/kernels/test_host_cpp.py builds and runs it, or by hand from the
// repository root:
//
//   g++ -std=c++17 -O2 -Wall -Wextra -I csrc csrc/tests/e8m0_test.cc \
//       -o /tmp/e8m0_test
//   /tmp/e8m0_test
//
// It checks, exhaustively:
//   * E8m0RoundUpNonNegative(v) == E8m0RoundUp(v) for every f32 bit pattern
//     with the sign bit clear that is not a NaN (2^31 - 2^23 + 1 inputs);
//   * E8m0ReciprocalScaleNotNan(e) == E8m0ReciprocalScale(e), bit for bit,
//     for every byte e != 0xFF;
//   * Mxfp8BlockScale's product then E8m0RoundUpNonNegative equals
//     Mxfp8BlockScale for every non-NaN, non-negative bf16 block amax of both
//     FP8 formats (what the kernels compute from a 16-bit key).

#include <cinttypes>
#include <cstdint>
#include <cstdio>

#include "common/e8m0.h"
#include "common/fp8_format.h"
#include "tests/host_test_expect.h"

namespace {

namespace eq = eqx_quant;

using eqx_quant::host_test::checks;
using eqx_quant::host_test::failures;

void CheckRoundUp() {
  for (uint32_t bits = 0; bits <= 0x7F800000u; ++bits) {  // +0 .. +inf
    const float v = eq::BitsToFloat(bits);
    const uint32_t want = eq::E8m0RoundUp(v);
    const uint32_t got = eq::E8m0RoundUpNonNegative(v);
    if (want != got) {
      EXPECT(want == got, "v bits 0x%08" PRIx32 ": %u != %u", bits,
             static_cast<unsigned>(got), static_cast<unsigned>(want));
    } else {
      ++checks;
    }
  }
}

void CheckReciprocal() {
  for (uint32_t e = 0; e < 0xFF; ++e) {
    const uint8_t byte = static_cast<uint8_t>(e);
    const uint32_t want = eq::FloatToBits(eq::E8m0ReciprocalScale(byte));
    const uint32_t got = eq::FloatToBits(eq::E8m0ReciprocalScaleNotNan(byte));
    EXPECT(want == got, "e 0x%02" PRIx32 ": 0x%08" PRIx32 " != 0x%08" PRIx32,
           e, got, want);
  }
}

template <typename Format>
void CheckBlockScale() {
  for (uint32_t key = 0; key <= 0x7F80u; ++key) {  // bf16 keys up to +inf
    const float amax = eq::BitsToFloat(key << 16);
    const uint8_t want = eq::Mxfp8BlockScale<Format>(amax);
    const uint32_t got = eq::E8m0RoundUpNonNegative(
        amax * eq::Fp8MaxReciprocal<Format>::kValue);
    EXPECT(want == got, "bf16 key 0x%04" PRIx32 ": %u != %u", key,
           static_cast<unsigned>(got), static_cast<unsigned>(want));
  }
}

}  // namespace

int main() {
  CheckRoundUp();
  CheckReciprocal();
  CheckBlockScale<eq::E4M3Fn>();
  CheckBlockScale<eq::E5M2>();
  std::printf("%" PRId64 " checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
