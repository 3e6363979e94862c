// Exhaustive host check of grouped_rcp::ExactReciprocal
// (grouped/rcp_cuda.cuh) against the IEEE division 1.0f / x on all 2^32
// floats (NaN results compared as the canonical 0x7FC00000). Standalone:
//   g++ -O2 -std=c++17 -ffp-contract=off -I csrc \
//       csrc/tests/grouped_rcp_cuda_test.cc -o /tmp/rcp_test && /tmp/rcp_test
// Exits non-zero and prints the first mismatches on failure.

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "grouped/rcp_cuda.cuh"

int main() {
  uint64_t bad = 0;
  for (uint64_t i = 0; i <= 0xFFFFFFFFull; ++i) {
    const uint32_t bits = static_cast<uint32_t>(i);
    float x;
    std::memcpy(&x, &bits, 4);
    const volatile float one = 1.0f;
    float want = one / x;
    uint32_t want_bits;
    std::memcpy(&want_bits, &want, 4);
    if ((want_bits & 0x7FFFFFFFu) > 0x7F800000u) want_bits = 0x7FC00000u;
    const float got = eqx_quant::grouped_rcp::ExactReciprocal(x);
    uint32_t got_bits;
    std::memcpy(&got_bits, &got, 4);
    if (got_bits != want_bits && bad++ < 10) {
      std::printf("x=%08x got %08x want %08x\n", bits, got_bits, want_bits);
    }
  }
  std::printf("%llu mismatches\n", static_cast<unsigned long long>(bad));
  return bad != 0;
}
