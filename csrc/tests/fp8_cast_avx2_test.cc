// Host unit test of common/fp8_cast_avx2.h, the AVX2 element loop of the CPU
// FP8 kernels. Not part of the library; tests/kernels/test_host_cpp.py builds
// and runs it, or by hand from the repository root:
//
//   g++ -std=c++17 -O2 -I csrc csrc/tests/fp8_cast_avx2_test.cc -o /tmp/t && /tmp/t full
//
// Against the scalar arithmetic of common/fp8_format.h:
//   * Fp8Codes8 + PackCodes32 == FloatToFp8, E4M3 and E5M2, for all 2^32 f32
//     bit patterns in the FPU's default modes (without `full`: every 7th, which
//     still meets every exponent, sign and low-bit pattern), and for every 251st pattern
//     (all exponents, signs and NaN payloads) with denormals flushed (FTZ and
//     DAZ) and with the rounding mode set to toward-zero and to upward;
//   * MaxAmaxKeys8 + HorizontalMaxKey == the max of AmaxKey over each run of
//     32 patterns;
//   * LoadBf16AsFloats8 == Bf16BitsToFloat for all 2^16 bfloat16 patterns.
// Exits 0 with a note where the CPU or compiler has no AVX2.

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/fp8_cast_avx2.h"
#include "common/fp8_format.h"
#include "tests/host_test_expect.h"

#if defined(EQX_QUANT_FP8_CAST_AVX2)

#include <xmmintrin.h>

namespace {

using eqx_quant::AmaxKey;
using eqx_quant::Bf16BitsToFloat;
using eqx_quant::BitsToFloat;
using eqx_quant::E4M3Fn;
using eqx_quant::E5M2;
using eqx_quant::FloatToBits;
using eqx_quant::FloatToFp8;
namespace cpu = eqx_quant::cpu;

constexpr int kRun = 32;  // patterns per PackCodes32 call

// Codes and the amax key of the 32 patterns first, first + stride, ...
template <typename Format>
__attribute__((target("avx2"))) uint32_t VectorRun(uint32_t first,
                                                   uint32_t stride,
                                                   uint8_t* codes) {
  alignas(32) uint32_t bits[kRun];
  for (int i = 0; i < kRun; ++i) bits[i] = first + static_cast<uint32_t>(i) * stride;
  __m256 v[4];
  __m256i keys = _mm256_setzero_si256();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_castsi256_ps(
        _mm256_load_si256(reinterpret_cast<const __m256i*>(bits + 8 * k)));
    keys = cpu::MaxAmaxKeys8(keys, v[k]);
  }
  const __m256i packed = cpu::PackCodes32(
      cpu::Fp8Codes8<Format>(v[0]), cpu::Fp8Codes8<Format>(v[1]),
      cpu::Fp8Codes8<Format>(v[2]), cpu::Fp8Codes8<Format>(v[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), packed);
  return cpu::HorizontalMaxKey(keys);
}

// Checks `count` patterns first, first + stride, ... (count a multiple of
// kChunk); returns the number of mismatching patterns (the first few are
// printed).
constexpr int kChunk = 4096;

// The scalar cast and amax keys of a chunk, in loops of their own compiled
// for AVX2 so that the compiler can vectorise them.
template <typename Format>
__attribute__((target("avx2"))) void ScalarCodes(const float* values,
                                                 uint8_t* codes,
                                                 uint32_t* keys) {
  for (int i = 0; i < kChunk; ++i) codes[i] = FloatToFp8<Format>(values[i]);
  for (int run = 0; run < kChunk / kRun; ++run) {
    uint32_t key = 0;
    for (int i = run * kRun; i < (run + 1) * kRun; ++i) {
      key = key > AmaxKey(values[i]) ? key : AmaxKey(values[i]);
    }
    keys[run] = key;
  }
}

template <typename Format>
int64_t CheckPatterns(const char* name, uint64_t first, uint64_t count,
                      uint32_t stride) {
  int64_t bad = 0;
  std::vector<uint8_t> codes(kChunk), expected(kChunk);
  std::vector<uint32_t> keys(kChunk / kRun), expected_keys(kChunk / kRun);
  std::vector<float> values(kChunk);
  for (uint64_t done = 0; done < count; done += kChunk) {
    const uint32_t start = static_cast<uint32_t>(first + done * stride);
    for (int i = 0; i < kChunk; ++i) {
      values[i] = BitsToFloat(start + static_cast<uint32_t>(i) * stride);
    }
    for (int run = 0; run < kChunk / kRun; ++run) {
      keys[run] = VectorRun<Format>(start + static_cast<uint32_t>(run * kRun) * stride,
                                    stride, codes.data() + run * kRun);
    }
    ScalarCodes<Format>(values.data(), expected.data(), expected_keys.data());
    for (int i = 0; codes != expected && i < kChunk; ++i) {
      if (codes[i] != expected[i] && ++bad <= 5) {
        std::printf("%s: f32 0x%08x: AVX2 0x%02x, scalar 0x%02x\n", name,
                    FloatToBits(values[i]), codes[i], expected[i]);
      }
    }
    EXPECT(keys == expected_keys, "%s: the amax keys of the chunk from 0x%08x",
           name, start);
  }
  return bad;
}

template <typename Format>
void CheckFormat(const char* name, bool full) {
  // Default modes: all 2^32 patterns in runs of consecutive ones, or every 7th (odd: every
  // residue modulo each power of two, so every exponent, sign and low-bit pattern).
  const uint32_t stride = full ? 1 : 7;
  const uint64_t count = ((uint64_t{1} << 32) / stride) / kChunk * kChunk;
  const int64_t all_bad = CheckPatterns<Format>(name, 0, count, stride);
  EXPECT(all_bad == 0, "%s: %" PRId64 " of %" PRIu64 " patterns differ", name, all_bad, count);

  // Other FPU modes: every 251st pattern (251 is odd, so the runs still visit
  // every exponent, sign and low-bit pattern).
  const unsigned saved = _mm_getcsr();
  const struct {
    const char* label;
    unsigned bits;
  } modes[] = {
      {"FTZ+DAZ", _MM_FLUSH_ZERO_ON | _MM_DENORMALS_ZERO_ON},
      {"toward zero", _MM_ROUND_TOWARD_ZERO},
      {"upward", _MM_ROUND_UP},
  };
  const uint64_t mode_count = ((uint64_t{1} << 32) / 251) / kChunk * kChunk;
  for (const auto& mode : modes) {
    _mm_setcsr((saved & ~(_MM_FLUSH_ZERO_MASK | _MM_DENORMALS_ZERO_MASK |
                          _MM_ROUND_MASK)) |
               mode.bits);
    const int64_t bad = CheckPatterns<Format>(name, 7, mode_count, 251);
    _mm_setcsr(saved);
    EXPECT(bad == 0, "%s, %s: %" PRId64 " patterns differ", name, mode.label, bad);
  }
}

__attribute__((target("avx2"))) void CheckBf16Loads() {
  std::vector<uint16_t> all(1 << 16);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (uint32_t i = 0; i < all.size(); i += 8) {
    alignas(32) float got[8];
    _mm256_store_ps(got, cpu::LoadBf16AsFloats8(all.data() + i));
    for (int k = 0; k < 8; ++k) {
      const uint32_t expected = FloatToBits(Bf16BitsToFloat(all[i + k]));
      EXPECT(FloatToBits(got[k]) == expected, "bf16 0x%04x: 0x%08x != 0x%08x",
             i + k, FloatToBits(got[k]), expected);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool full = argc > 1 && std::strcmp(argv[1], "full") == 0;
  if (!__builtin_cpu_supports("avx2")) {
    std::printf("fp8_cast_avx2_test: this CPU has no AVX2; nothing to test\n");
    return 0;
  }
  CheckBf16Loads();
  CheckFormat<E4M3Fn>("e4m3", full);
  CheckFormat<E5M2>("e5m2", full);
  std::printf("fp8_cast_avx2_test: %" PRId64 " checks, %d failures\n",
              eqx_quant::host_test::checks, eqx_quant::host_test::failures);
  return eqx_quant::host_test::failures == 0 ? 0 : 1;
}

#else  // no AVX2 form on this target

int main() {
  std::printf("fp8_cast_avx2_test: not x86-64 with GCC or Clang; nothing to test\n");
  return 0;
}

#endif
