// Host unit test of common/byte_transpose.h, the transposition of the CPU
// kernels' colwise copies. Not part of the library;
// tests/kernels/test_host_cpp.py builds and runs it, or by hand from the
// repository root:
//
//   g++ -std=c++17 -O2 -I csrc csrc/tests/byte_transpose_test.cc -o /tmp/t && /tmp/t
//
// TransposeBytes and Transpose16x16Bytes against the definition
// dst[c * dst_stride + r] = src[r * src_stride + c], on random bytes, for
// every rows x cols in [0, 40]^2 and a few larger shapes, with padded strides;
// bytes outside the destination rectangle must stay untouched.

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "common/byte_transpose.h"
#include "tests/host_test_expect.h"

namespace {

constexpr uint8_t kUntouched = 0xA5;

void Check(std::mt19937& rng, int64_t rows, int64_t cols, int64_t src_pad,
           int64_t dst_pad) {
  const int64_t src_stride = cols + src_pad;
  const int64_t dst_stride = rows + dst_pad;
  std::vector<uint8_t> src(static_cast<size_t>(rows * src_stride + 1));
  for (auto& byte : src) byte = static_cast<uint8_t>(rng());
  std::vector<uint8_t> dst(static_cast<size_t>(cols * dst_stride + 1),
                           kUntouched);
  eqx_quant::cpu::TransposeBytes(src.data(), src_stride, dst.data(), dst_stride,
                                 rows, cols);
  int64_t bad = 0;
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = 0; r < dst_stride; ++r) {
      const uint8_t expected =
          r < rows ? src[r * src_stride + c] : kUntouched;
      bad += dst[c * dst_stride + r] != expected;
    }
  }
  bad += dst.back() != kUntouched;
  EXPECT(bad == 0, "rows=%" PRId64 " cols=%" PRId64 " pads %" PRId64
         "/%" PRId64 ": %" PRId64 " wrong bytes",
         rows, cols, src_pad, dst_pad, bad);
}

}  // namespace

int main() {
  std::mt19937 rng(20261207);
  for (int64_t rows = 0; rows <= 40; ++rows) {
    for (int64_t cols = 0; cols <= 40; ++cols) {
      Check(rng, rows, cols, 0, 0);
      Check(rng, rows, cols, 7, 3);
    }
  }
  const int64_t shapes[][2] = {{64, 2048}, {64, 2000}, {17, 2048}, {128, 33},
                               {256, 256}, {63, 129}};
  for (const auto& shape : shapes) {
    Check(rng, shape[0], shape[1], 64, 0);
    Check(rng, shape[0], shape[1], 0, 5);
  }
#if defined(__SSE2__)
  // The tile alone, at unaligned addresses.
  std::vector<uint8_t> src(16 * 19 + 3);
  std::vector<uint8_t> dst(16 * 21 + 5);
  for (auto& byte : src) byte = static_cast<uint8_t>(rng());
  eqx_quant::cpu::Transpose16x16Bytes(src.data() + 3, 19, dst.data() + 5, 21);
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      EXPECT(dst[5 + c * 21 + r] == src[3 + r * 19 + c], "tile (%d, %d)", r, c);
    }
  }
#endif
  std::printf("byte_transpose_test: %" PRId64 " checks, %d failures\n",
              eqx_quant::host_test::checks, eqx_quant::host_test::failures);
  return eqx_quant::host_test::failures == 0 ? 0 : 1;
}
