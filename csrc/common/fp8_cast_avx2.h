// AVX2 forms of the per-element FP8 cast and amax key of common/fp8_format.h,
// eight lanes at a time, for the CPU kernels' element loops (host only, x86-64
// with GCC or Clang; callers check __builtin_cpu_supports("avx2") first).
//
// Each lane gives exactly FloatToFp8<Format> / AmaxKey of its input, for every
// f32 bit pattern and whatever the FPU's rounding and denormal modes
// (csrc/tests/fp8_cast_avx2_test.cc checks all 2^32 inputs). The compiler's own
// vectorisation of FloatToFp8 spends most of its instructions on the
// subnormal candidate's variable shifts and on narrowing each vector to bytes
// separately; here the subnormal candidate is one rounding of a
// power-of-two-scaled float and four vectors are narrowed together.

#ifndef EQX_QUANT_CSRC_COMMON_FP8_CAST_AVX2_H_
#define EQX_QUANT_CSRC_COMMON_FP8_CAST_AVX2_H_

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define EQX_QUANT_FP8_CAST_AVX2 1

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "common/cpu_input.h"
#include "common/fp8_format.h"

namespace eqx_quant::cpu {

#define EQX_QUANT_AVX2 __attribute__((target("avx2"), always_inline)) inline

// The FP8 codes of eight floats, one per 32-bit lane (0..255).
template <typename Format>
EQX_QUANT_AVX2 __m256i Fp8Codes8(__m256 value) {
  constexpr int kDroppedBits = 23 - Format::kMantissaBits;
  constexpr int kMinNormalExponent = 1 - Format::kExponentBias;
  constexpr int32_t kMinNormalF32Bits = (kMinNormalExponent + 127) << 23;
  constexpr int32_t kRebias = (127 - Format::kExponentBias) << 23;
  // Below the smallest normal, |value| in units of the smallest subnormal,
  // 2^(kMinNormalExponent - kMantissaBits): an exact power-of-two product.
  constexpr float kSubnormalUnits =
      static_cast<float>(1u << (Format::kMantissaBits - kMinNormalExponent));

  const __m256i bits = _mm256_castps_si256(value);
  const __m256i magnitude =
      _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i sign =
      _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80));

  // Normal range: as FloatToFp8 (rebias, round the mantissa to nearest even).
  const __m256i shifted =
      _mm256_sub_epi32(magnitude, _mm256_set1_epi32(kRebias));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(shifted, kDroppedBits),
                                       _mm256_set1_epi32(1));
  const __m256i normal = _mm256_srli_epi32(
      _mm256_add_epi32(
          _mm256_add_epi32(shifted,
                           _mm256_set1_epi32((1 << (kDroppedBits - 1)) - 1)),
          odd),
      kDroppedBits);

  // Subnormal range: the units rounded to the nearest integer, ties to even,
  // by the rounding mode named in the instruction (not the FPU's). A carry to
  // 2^kMantissaBits is the smallest normal's code, as in FloatToFp8. The min
  // keeps large, infinite and NaN lanes (which take another candidate) in
  // range of the integer conversion; an f32 subnormal gives 0 also where
  // denormals are flushed.
  __m256 units = _mm256_mul_ps(_mm256_castsi256_ps(magnitude),
                               _mm256_set1_ps(kSubnormalUnits));
  units = _mm256_min_ps(units, _mm256_set1_ps(16.0f));  // NaN -> 16
  const __m256i subnormal = _mm256_cvttps_epi32(
      _mm256_round_ps(units, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));

  // Magnitudes are at most 0x7FFFFFFF, so signed comparisons order them.
  __m256i result = _mm256_blendv_epi8(
      subnormal, normal,
      _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(kMinNormalF32Bits - 1)));
  result = _mm256_blendv_epi8(
      result, _mm256_set1_epi32(Format::kMaxFiniteByte),
      _mm256_cmpgt_epi32(
          magnitude,
          _mm256_set1_epi32(static_cast<int32_t>(Format::kMaxFiniteF32Bits) -
                            1)));
  result = _mm256_or_si256(result, sign);
  return _mm256_blendv_epi8(
      result, _mm256_set1_epi32(kFp8NanByte),
      _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7F800000)));
}

// The running amax key (AmaxKey per lane) with eight more values.
EQX_QUANT_AVX2 __m256i MaxAmaxKeys8(__m256i keys, __m256 value) {
  const __m256i magnitude = _mm256_and_si256(_mm256_castps_si256(value),
                                             _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i not_nan =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7F800001), magnitude);
  return _mm256_max_epu32(keys, _mm256_and_si256(magnitude, not_nan));
}

// The largest of the eight keys.
EQX_QUANT_AVX2 uint32_t HorizontalMaxKey(__m256i keys) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(keys),
                            _mm256_extracti128_si256(keys, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(m));
}

// Four vectors of codes (0..255 per lane) as 32 bytes in lane order.
EQX_QUANT_AVX2 __m256i PackCodes32(__m256i c0, __m256i c1, __m256i c2,
                                   __m256i c3) {
  // The packs work within 128-bit halves: dword d of the result holds the
  // four bytes of c[d % 4], low half for d < 4, high half otherwise.
  const __m256i packed = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1),
                                             _mm256_packus_epi32(c2, c3));
  return _mm256_permutevar8x32_epi32(packed,
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Eight elements as floats (exact widening), for the input types that have
// an AVX2 load (kHasAvx2Load): f32 and bf16. float16's widening needs F16C, so
// its inputs stay on the compiler-vectorised loops.
template <typename Input>
inline constexpr bool kHasAvx2Load = !std::is_same_v<Input, F16Input>;

EQX_QUANT_AVX2 __m256 LoadFloats8(const float* src) {
  return _mm256_loadu_ps(src);
}
EQX_QUANT_AVX2 __m256 LoadBf16AsFloats8(const uint16_t* src) {
  const __m128i halves =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
}
template <typename Input>
EQX_QUANT_AVX2 __m256 LoadAsFloats8(const typename Input::Storage* src) {
  static_assert(kHasAvx2Load<Input>);
  if constexpr (std::is_same_v<Input, Bf16Input>) {
    return LoadBf16AsFloats8(src);
  } else {
    return LoadFloats8(src);
  }
}

// The FP8 bytes of 32 already scaled values, stored at `out`.
template <typename Format>
EQX_QUANT_AVX2 void StoreFp8Codes32(uint8_t* out, const __m256 (&scaled)[4]) {
  _mm256_storeu_si256(
      reinterpret_cast<__m256i*>(out),
      PackCodes32(Fp8Codes8<Format>(scaled[0]), Fp8Codes8<Format>(scaled[1]),
                  Fp8Codes8<Format>(scaled[2]), Fp8Codes8<Format>(scaled[3])));
}

#undef EQX_QUANT_AVX2

}  // namespace eqx_quant::cpu

#endif  // x86-64 with GCC or Clang
#endif  // EQX_QUANT_CSRC_COMMON_FP8_CAST_AVX2_H_
