// Host unit test of the grouped layout arithmetic (common/grouped_layout.h).
// Not part of the library; tests/kernels/test_host_cpp.py builds and runs it,
// or by hand from the repository root:
//
//   g++ -std=c++17 -O2 -Wall -Wextra -I csrc \
//       csrc/tests/grouped_layout_test.cc -o /tmp/layout_test && /tmp/layout_test
//
// It checks:
//   * W(R, G, u) (WorstCaseUnits) equals the brute-force maximum of
//     sum_g ceil(rows_g / u) over every composition of at most R rows into G
//     groups, for R <= 12, G <= 4, u <= 5; the docs/grouped.md example
//     (MXFP8 (1024, 256), G = 8: 15360 bytes each way);
//   * SwizzleOffset is a bijection of each padded region onto [0, P*Q) and
//     matches the tile permutation written the other way round (the
//     reference's reshape(P/128, 4, 32, Q/4, 4).transpose(0, 3, 2, 1, 4));
//     SwizzleOffset32 equals it there and at offsets just below 2^32;
//   * GroupStarts: negative sizes count as 0, overflowing products and sums
//     past R are clamped, rows_per_unit > 1.

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "common/grouped_layout.h"
#include "tests/host_test_expect.h"

namespace {

namespace g = eqx_quant::grouped;

using eqx_quant::host_test::checks;
using eqx_quant::host_test::failures;

// ---------------------------------------------------------------------------
// Layout

int64_t BruteMaxUnits(int64_t rows, int64_t groups, int64_t unit,
                      int64_t left, int64_t acc) {
  if (groups == 0) return acc;
  int64_t best = 0;
  for (int64_t r = 0; r <= left; ++r) {
    best = std::max(best, BruteMaxUnits(rows, groups - 1, unit, left - r,
                                        acc + g::CeilDiv(r, unit)));
  }
  return best;
}

void TestWorstCase() {
  for (int64_t rows = 0; rows <= 12; ++rows) {
    for (int64_t groups = 1; groups <= 4; ++groups) {
      for (int64_t unit = 1; unit <= 5; ++unit) {
        const int64_t brute = BruteMaxUnits(rows, groups, unit, rows, 0);
        const int64_t w = g::WorstCaseUnits(rows, groups, unit);
        EXPECT(brute == w, "W(%" PRId64 ", %" PRId64 ", %" PRId64
                           ") = %" PRId64 " but brute force %" PRId64,
               rows, groups, unit, w, brute);
      }
    }
  }
  // docs/grouped.md: MXFP8 (1024, 256), G = 8.
  EXPECT(g::ScaleBufferBytes(g::ScalePart::kRowwise, 1024, 256, 8, 32) == 15360,
         "rowwise example");
  EXPECT(g::ScaleBufferBytes(g::ScalePart::kColwise, 1024, 256, 8, 32) == 15360,
         "colwise example");
  EXPECT(g::ScaleBufferBytes(g::ScalePart::kRowwise, 0, 256, 8, 32) == 0,
         "empty R");
}

void TestSwizzle() {
  for (int64_t p = 128; p <= 384; p += 128) {
    for (int64_t q = 4; q <= 16; q += 4) {
      std::vector<int> seen(static_cast<size_t>(p * q), 0);
      for (int64_t i = 0; i < p; ++i) {
        for (int64_t j = 0; j < q; ++j) {
          const int64_t o = g::SwizzleOffset(i, j, q);
          // (a, b, c) = (i / 128, (i % 128) / 32, i % 32), (d, e) = (j / 4,
          // j % 4) move to position (a, d, c, b, e) of (P/128, Q/4, 32, 4, 4).
          const int64_t a = i / 128, b = (i % 128) / 32, c = i % 32;
          const int64_t d = j / 4, e = j % 4;
          const int64_t want = (((a * (q / 4) + d) * 32 + c) * 4 + b) * 4 + e;
          EXPECT(o == want, "swizzle (%" PRId64 ", %" PRId64 ")", i, j);
          EXPECT(g::SwizzleOffset32(static_cast<uint32_t>(i),
                                    static_cast<uint32_t>(j),
                                    static_cast<uint32_t>(q)) == o,
                 "swizzle32 (%" PRId64 ", %" PRId64 ")", i, j);
          if (o >= 0 && o < p * q) ++seen[static_cast<size_t>(o)];
        }
      }
      for (int count : seen) EXPECT(count == 1, "swizzle not a bijection");
    }
  }
}

// SwizzleOffset32 equals SwizzleOffset up to offsets near 2^32 (the largest
// scale buffer its device callers accept), in a region of Q = 2^20 columns.
void TestSwizzle32Large() {
  const int64_t q = int64_t{1} << 20;
  const int64_t rows = (int64_t{1} << 32) / q;  // 4096: the region is 2^32 bytes
  for (int64_t i = rows - 300; i < rows; i += 7) {
    for (int64_t j = q - 9; j < q; ++j) {
      const int64_t o = g::SwizzleOffset(i, j, q);
      EXPECT(o < (int64_t{1} << 32), "large swizzle in range");
      EXPECT(int64_t{g::SwizzleOffset32(static_cast<uint32_t>(i),
                                        static_cast<uint32_t>(j),
                                        static_cast<uint32_t>(q))} == o,
             "swizzle32 (%" PRId64 ", %" PRId64 ")", i, j);
    }
  }
}

void TestStarts() {
  int64_t starts[5];
  {
    const int32_t sizes[4] = {3, -2, 0, 4};
    g::GroupStarts(sizes, 4, 2, 100, starts);
    const int64_t want[5] = {0, 6, 6, 6, 14};
    for (int i = 0; i < 5; ++i) EXPECT(starts[i] == want[i], "starts %d", i);
  }
  {
    const int32_t sizes[4] = {5, 7, 1, 9};  // clamped at R = 10
    g::GroupStarts(sizes, 4, 1, 10, starts);
    const int64_t want[5] = {0, 5, 10, 10, 10};
    for (int i = 0; i < 5; ++i) EXPECT(starts[i] == want[i], "clamp %d", i);
  }
  {
    const int32_t big = std::numeric_limits<int32_t>::max();
    const int32_t sizes[4] = {big, big, big, big};
    const int64_t u = int64_t{1} << 40;  // size * U would overflow int64
    g::GroupStarts(sizes, 4, u, int64_t{3} << 40, starts);
    EXPECT(starts[1] == (int64_t{3} << 40) && starts[4] == starts[1],
           "overflow clamp");
  }
}

}  // namespace

int main() {
  TestWorstCase();
  TestSwizzle();
  TestSwizzle32Large();
  TestStarts();
  std::printf("%" PRId64 " checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
