// Host unit test of common/magic_division.h, the launch-constant division of
// the dbias + current scaling kernels' sub-tile walk. Not part of the library;
// tests/kernels/test_host_cpp.py builds and runs it, or by hand from the
// repository root:
//
//   g++ -std=c++17 -O2 -Wall -Wextra -I csrc \
//       csrc/tests/magic_division_test.cc -o /tmp/magic_division_test
//   /tmp/magic_division_test
//
// MagicQuotient(n, MakeMagicDivisor(d)) == n / d:
//   * for every d in [1, 2^12] and every n in [0, 2^16), and n near each of
//     the first 64 multiples of d;
//   * for d and n at the ends of their ranges (2^31 - 1, powers of two and
//     their neighbours) and 2^20 random (d, n) pairs, d and n below 2^31.

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "common/magic_division.h"
#include "tests/host_test_expect.h"

namespace {

using eqx_quant::MagicDivisor;
using eqx_quant::MagicQuotient;
using eqx_quant::MakeMagicDivisor;

constexpr uint32_t kLimit = uint32_t{1} << 31;  // n, d < 2^31

void Check(uint32_t n, uint32_t d) {
  const MagicDivisor m = MakeMagicDivisor(d);
  EXPECT(MagicQuotient(n, m) == n / d, "n=%u d=%u: %u != %u", n, d,
         MagicQuotient(n, m), n / d);
}

}  // namespace

int main() {
  for (uint32_t d = 1; d <= (1u << 12); ++d) {
    for (uint32_t n = 0; n < (1u << 16); ++n) Check(n, d);
    for (uint64_t k = 1; k <= 64; ++k) {
      for (int64_t delta = -1; delta <= 1; ++delta) {
        const int64_t n = static_cast<int64_t>(k * d) + delta;
        if (n >= 0 && n < kLimit) Check(static_cast<uint32_t>(n), d);
      }
    }
  }
  std::vector<uint32_t> ends = {1, 2, 3, kLimit - 1, kLimit - 2, kLimit / 3};
  for (int b = 1; b < 31; ++b) {
    ends.push_back((1u << b) - 1);
    ends.push_back(1u << b);
    ends.push_back((1u << b) + 1);
  }
  for (uint32_t d : ends) {
    for (uint32_t n : ends) {
      if (d < kLimit && n < kLimit) Check(n, d);
    }
  }
  std::mt19937 rng(20261203);
  std::uniform_int_distribution<uint32_t> below(0, kLimit - 1);
  for (int i = 0; i < (1 << 20); ++i) {
    const uint32_t d = below(rng) >> (rng() % 31);  // every magnitude
    Check(below(rng), d == 0 ? 1 : d);
  }
  std::printf("magic_division_test: %" PRId64 " checks, %d failures\n",
              eqx_quant::host_test::checks, eqx_quant::host_test::failures);
  return eqx_quant::host_test::failures == 0 ? 0 : 1;
}
