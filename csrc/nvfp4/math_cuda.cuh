// The element and block arithmetic of the NVFP4 CUDA kernels: the fast E2M1
// encoder, the 16-point RHT as a Walsh-Hadamard butterfly, block amax keys
// and the scale byte. Everything here computes exactly what the CPU kernel's
// helpers (common/nvfp4_format.h, common/rht.h) compute. The functions are
// host/device (single SASS instructions on the device, portable code on the
// host), so that a host program can compare them with those helpers on every
// input that matters (all 2^31 non-negative non-NaN floats for the encoder).
//
// Float operations are explicit IEEE binary32 round-to-nearest operations
// (__fadd_rn / __fmul_rn on the device; on the host SSE arithmetic without
// contraction).

#ifndef EQX_QUANT_CSRC_NVFP4_MATH_CUDA_CUH_
#define EQX_QUANT_CSRC_NVFP4_MATH_CUDA_CUH_

#include <cmath>
#include <cstdint>

#include "common/fp8_format.h"
#include "common/host_device.h"
#include "common/nvfp4_format.h"
#include "common/rht.h"

namespace eqx_quant::cuda::nvfp4 {

constexpr int kB = kNvfp4Block;  // 16

// ---------------------------------------------------------------------------
// IEEE operations and integer helpers (single SASS instructions on sm_90).

EQX_QUANT_HOST_DEVICE inline float AddRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

EQX_QUANT_HOST_DEVICE inline float SubRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

EQX_QUANT_HOST_DEVICE inline float MulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// fl(a * b + c), one rounding (FFMA).
EQX_QUANT_HOST_DEVICE inline float FmaRn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// min(max(fl(a * b), 0), 1), NaN -> 0 (FMUL.SAT).
EQX_QUANT_HOST_DEVICE inline float MulSatRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __saturatef(__fmul_rn(a, b));
#else
  const float p = a * b;
  return p > 0.0f ? (p < 1.0f ? p : 1.0f) : 0.0f;
#endif
}

#if !defined(__CUDA_ARCH__)
// Host model of a per-16-bit-half instruction: f(a_h, b_h, c_h) for each half
// h (as uint32 0..0xFFFF), the low 16 bits of each result put back in place.
template <typename F>
inline uint32_t PerHalf(uint32_t a, uint32_t b, uint32_t c, F f) {
  uint32_t out = 0;
  for (int h = 0; h < 2; ++h) {
    const uint32_t r = f((a >> (16 * h)) & 0xFFFFu, (b >> (16 * h)) & 0xFFFFu,
                         (c >> (16 * h)) & 0xFFFFu);
    out |= (r & 0xFFFFu) << (16 * h);
  }
  return out;
}
#endif

// Per signed 16-bit half: min(a + b (wrapping), c) (VIADDMNMX.S16x2).
EQX_QUANT_HOST_DEVICE inline uint32_t AddMinS16x2(uint32_t a, uint32_t b,
                                                  uint32_t c) {
#if defined(__CUDA_ARCH__)
  return __viaddmin_s16x2(a, b, c);
#else
  return PerHalf(a, b, c, [](uint32_t x, uint32_t y, uint32_t z) {
    const int16_t sum = static_cast<int16_t>(static_cast<uint16_t>(x + y));
    const int16_t limit = static_cast<int16_t>(static_cast<uint16_t>(z));
    return static_cast<uint32_t>(static_cast<uint16_t>(sum < limit ? sum : limit));
  });
#endif
}

// min(a + b, c) (VIADDMNMX).
EQX_QUANT_HOST_DEVICE inline int32_t AddMin(int32_t a, int32_t b, int32_t c) {
#if defined(__CUDA_ARCH__)
  return __viaddmin_s32(a, b, c);
#else
  const int32_t s = a + b;
  return s < c ? s : c;
#endif
}

// max(a, b, c) (VIMNMX3).
EQX_QUANT_HOST_DEVICE inline uint32_t Max3(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
  return __vimax3_u32(a, b, c);
#else
  const uint32_t m = a > b ? a : b;
  return m > c ? m : c;
#endif
}

// Per 16-bit half: max(a, b, c).
EQX_QUANT_HOST_DEVICE inline uint32_t Max3U16x2(uint32_t a, uint32_t b,
                                                uint32_t c) {
#if defined(__CUDA_ARCH__)
  return __vimax3_u16x2(a, b, c);
#else
  return PerHalf(a, b, c, [](uint32_t x, uint32_t y, uint32_t z) {
    return Max3(x, y, z);
  });
#endif
}

// Byte n of the result is byte ((s >> 4n) & 7) of the 8 bytes {y:x}.
EQX_QUANT_HOST_DEVICE inline uint32_t BytePerm(uint32_t x, uint32_t y,
                                               uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t all = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t out = 0;
  for (int n = 0; n < 4; ++n) {
    const uint32_t sel = (s >> (4 * n)) & 7u;
    out |= static_cast<uint32_t>((all >> (8 * sel)) & 0xFFu) << (8 * n);
  }
  return out;
#endif
}

// ---------------------------------------------------------------------------
// E2M1 encoding.

// The E2M1 magnitude code (0..7) of a >= 0 (not NaN; inf allowed), rounded
// to nearest even and saturated: == FloatToE2M1(a) for such a.
//
// The real-valued code of a is the concave piecewise-linear
// min(2a, a + 2, a/2 + 4) (the three binades of E2M1's grid: steps 0.5, 1,
// 2); rounding to the nearest integer, ties to even, is monotone and so
// commutes with the min, and shifting by an even integer keeps ties even:
//   code = min(RNE(2a), RNE(a) + 2, RNE(a/2) + 4, 7).
// RNE(2a) is the bit distance of fl(a + 2^22) from 2^22 (the ulp there is
// 0.5), likewise fl(a + 2^23) (ulp 1) and fl(a + 2^24) (ulp 2); for a at or
// above those magic numbers the distance is only larger, and the min with 7
// decides. 3 FADD + 3 VIADDMNMX.
EQX_QUANT_HOST_DEVICE inline uint32_t E2M1Magnitude(float a) {
  const int32_t r1 = static_cast<int32_t>(FloatToBits(AddRn(a, 4194304.0f)));
  const int32_t r2 = static_cast<int32_t>(FloatToBits(AddRn(a, 8388608.0f)));
  const int32_t r3 = static_cast<int32_t>(FloatToBits(AddRn(a, 16777216.0f)));
  int32_t code = AddMin(r3, 4 - 0x4B800000, 7);
  code = AddMin(r2, 2 - 0x4B000000, code);
  code = AddMin(r1, -0x4A800000, code);
  return static_cast<uint32_t>(code);
}

// The top bytes of four words, in order (a's in the low byte): 3 PRMT.
EQX_QUANT_HOST_DEVICE inline uint32_t TopBytes4(uint32_t a, uint32_t b,
                                                uint32_t c, uint32_t d) {
  return BytePerm(BytePerm(a, b, 0x0073u), BytePerm(c, d, 0x0073u), 0x5410u);
}

// The sign bits of four floats at bit 3 of the four bytes of a word.
EQX_QUANT_HOST_DEVICE inline uint32_t SignBits4(float v0, float v1, float v2,
                                                float v3) {
  return (TopBytes4(FloatToBits(v0), FloatToBits(v1), FloatToBits(v2),
                    FloatToBits(v3)) >> 4) & 0x08080808u;
}

EQX_QUANT_HOST_DEVICE inline uint32_t Pack4(uint32_t c0, uint32_t c1,
                                            uint32_t c2, uint32_t c3) {
  return c0 | (c1 << 8) | (c2 << 16) | (c3 << 24);
}

// Codes of N (a multiple of 4) values times `enc` (> 0), one byte each,
// little-endian in N/4 words: FloatToE2M1(fl(v * enc)) for NaN-free v (y
// keeps v's sign, and |fl(v * enc)| = fl(|v| * enc)).
template <int N>
EQX_QUANT_HOST_DEVICE inline void EncodeFast(const float (&v)[N], float enc,
                                             uint32_t (&q)[N / 4]) {
EQX_QUANT_UNROLL
  for (int w = 0; w < N / 4; ++w) {
    uint32_t c[4];
EQX_QUANT_UNROLL
    for (int e = 0; e < 4; ++e) {
      c[e] = E2M1Magnitude(MulRn(fabsf(v[4 * w + e]), enc));
    }
    q[w] = Pack4(c[0], c[1], c[2], c[3]) |
           SignBits4(v[4 * w], v[4 * w + 1], v[4 * w + 2], v[4 * w + 3]);
  }
}

// The same for any values (NaN -> 0x7), with the CPU kernel's encoder.
template <int N>
EQX_QUANT_HOST_DEVICE inline void EncodeExact(const float (&v)[N], float enc,
                                              uint32_t (&q)[N / 4]) {
EQX_QUANT_UNROLL
  for (int w = 0; w < N / 4; ++w) {
    uint32_t c[4];
EQX_QUANT_UNROLL
    for (int e = 0; e < 4; ++e) c[e] = FloatToE2M1(MulRn(v[4 * w + e], enc));
    q[w] = Pack4(c[0], c[1], c[2], c[3]);
  }
}

// ---------------------------------------------------------------------------
// Packed 16-bit inputs (bf16 or f16 bits, two per word: element 2k in the
// low half of word k, 2k + 1 in its high half): the block key and the code
// word of 8 values without unpacking them (RowHalfKernel).

// Per 16-bit half: max(a, b).
EQX_QUANT_HOST_DEVICE inline uint32_t MaxU16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __vmaxu2(a, b);
#else
  return Max3U16x2(a, b, 0u);
#endif
}

// Per half: the max magnitude bits (sign cleared) over the 8 values of w.
// Both formats order magnitudes as their bits do, NaN above inf.
EQX_QUANT_HOST_DEVICE inline uint32_t HalfMagnitudeMax(const uint32_t (&w)[4]) {
  constexpr uint32_t kClear = 0x7FFF7FFFu;
  return MaxU16x2(Max3U16x2(w[0] & kClear, w[1] & kClear, w[2] & kClear),
                  w[3] & kClear);
}

// max(low half, high half) of m in the low half (the high half is m's).
EQX_QUANT_HOST_DEVICE inline uint32_t FoldHalves(uint32_t m) {
  return MaxU16x2(m, m >> 16);
}

// Byte n of the result: 0xFF if the top bit of byte ((s >> 4n) & 7) of
// {y:x} is set, else 0 (PRMT with sign-replicating selectors).
EQX_QUANT_HOST_DEVICE inline uint32_t ByteSigns(uint32_t x, uint32_t y,
                                                uint32_t s) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(s | 0x8888u));
  return r;
#else
  const uint32_t bytes = BytePerm(x, y, s & 0x7777u);
  uint32_t out = 0;
  for (int n = 0; n < 4; ++n) {
    if ((bytes >> (8 * n + 7)) & 1u) out |= 0xFFu << (8 * n);
  }
  return out;
#endif
}

// The sign bits of the 8 values of w at bit 3 of their nibbles (element e:
// bit 4e + 3): byte b of the code word holds elements 2b (low nibble) and
// 2b + 1, whose signs are bits 15 and 31 of w[b]. 4 PRMT; the two masks
// merge into the magnitudes with two LOP3.
EQX_QUANT_HOST_DEVICE inline uint32_t SignNibbles8(const uint32_t (&w)[4],
                                                   uint32_t magnitudes) {
  const uint32_t s01 = ByteSigns(w[0], w[1], 0x7351u);  // s0 s2 s1 s3
  const uint32_t s23 = ByteSigns(w[2], w[3], 0x7351u);  // s4 s6 s5 s7
  const uint32_t even = BytePerm(s01, s23, 0x5410u);    // s0 s2 s4 s6
  const uint32_t odd = BytePerm(s01, s23, 0x7632u);     // s1 s3 s5 s7
  return (magnitudes | (even & 0x08080808u)) | (odd & 0x80808080u);
}

// The E2M1 magnitude codes of two magnitudes a0, a1 (>= 0, NaN-free) from
// s = min(a / 8, 1), exactly as computed by MulSatRn(|v|, enc / 8) when
// a = fl(|v| * enc) and enc / 8 is exact: code(a0) in the low 16-bit half,
// code(a1) in the high one. E2M1Magnitude's three lines on two values at
// once: with 2a = 16 s <= 16 (a > 8 saturates to code 7 either way), each
// rounded term is the bit distance of fma(s, 2^(4-k), 2^23) from 2^23 (k =
// 0, 1, 2: RNE(2a), RNE(a), RNE(a/2); the products are exact, one rounding,
// ties to even), at most 16, so the low 16 bits hold it and the high 16 bits
// are 0x4B00. r(a0) + r(a1) << 16 (IMAD) carries them as signed halves:
// low = t(a0), high = 0x4B00 + t(a1); one VIADDMNMX.S16x2 per line takes
// the min of both values at once. 6 FFMA + 3 IMAD + 3 VIADDMNMX.S16x2 for
// two values (E2M1Magnitude: 6 FADD + 6 VIADDMNMX).
EQX_QUANT_HOST_DEVICE inline uint32_t E2M1MagnitudePair(float s0, float s1) {
  constexpr float kMagic = 8388608.0f;  // 2^23: unit in the last place 1
  constexpr uint32_t kHigh = 0x4B00u;   // the high half of its bits
  auto pair = [](float t0, float t1) {
    return FloatToBits(t0) + (FloatToBits(t1) << 16);
  };
  auto offsets = [](uint32_t add) {  // per half: + add, the high one - kHigh
    return add | (((add - kHigh) & 0xFFFFu) << 16);
  };
  const uint32_t half_a = pair(FmaRn(s0, 4.0f, kMagic), FmaRn(s1, 4.0f, kMagic));
  const uint32_t whole_a = pair(FmaRn(s0, 8.0f, kMagic), FmaRn(s1, 8.0f, kMagic));
  const uint32_t twice_a =
      pair(FmaRn(s0, 16.0f, kMagic), FmaRn(s1, 16.0f, kMagic));
  uint32_t code = AddMinS16x2(half_a, offsets(4), 0x00070007u);
  code = AddMinS16x2(whole_a, offsets(2), code);
  return AddMinS16x2(twice_a, offsets(0), code);
}

// enc / 8 is exact (a normal number): the multiplier condition of
// E2M1MagnitudePair and CodeWord8Scaled.
EQX_QUANT_HOST_DEVICE inline bool EighthIsExact(float enc) {
  return FloatToBits(MulRn(enc, 0.125f)) >= 0x00800000u;
}

// CodeWord8 from s[e] = MulSatRn(|v_e|, enc / 8) (enc / 8 exact): element e
// and e + 4 share a pair, whose word shifted by 4e puts both codes in place.
EQX_QUANT_HOST_DEVICE inline uint32_t CodeWord8Scaled(const float (&s)[8],
                                                      const uint32_t (&w)[4]) {
  uint32_t m = E2M1MagnitudePair(s[0], s[4]);
EQX_QUANT_UNROLL
  for (int e = 1; e < 4; ++e) m += E2M1MagnitudePair(s[e], s[e + 4]) << (4 * e);
  return SignNibbles8(w, m);
}

// The code word of 8 magnitudes a (>= 0, NaN-free) and the sign bits of
// the 8 values of w: nibble e = E2M1Magnitude(a[e]) | sign(e) << 3.
EQX_QUANT_HOST_DEVICE inline uint32_t CodeWord8(const float (&a)[8],
                                                const uint32_t (&w)[4]) {
  uint32_t m = E2M1Magnitude(a[0]);
EQX_QUANT_UNROLL
  for (int e = 1; e < 8; ++e) m += E2M1Magnitude(a[e]) << (4 * e);
  return SignNibbles8(w, m);
}

// ---------------------------------------------------------------------------
// Block amax keys (common/nvfp4_format.h's AmaxKey: magnitude bits, NaN -> 0).

constexpr uint32_t kF32Magnitude = 0x7FFFFFFFu;
constexpr uint32_t kF32Inf = 0x7F800000u;

// max of the magnitude bits of N (even) values, NaN included (> kF32Inf if
// there is one).
template <int N>
EQX_QUANT_HOST_DEVICE inline uint32_t RawKey(const float (&v)[N]) {
  uint32_t m = 0;
EQX_QUANT_UNROLL
  for (int i = 0; i < N; i += 2) {
    m = Max3(m, FloatToBits(v[i]) & kF32Magnitude,
             FloatToBits(v[i + 1]) & kF32Magnitude);
  }
  return m;
}

// max of AmaxKey over N (even) values (NaN ignored).
template <int N>
EQX_QUANT_HOST_DEVICE inline uint32_t NanFreeKey(const float (&v)[N]) {
  uint32_t m = 0;
EQX_QUANT_UNROLL
  for (int i = 0; i < N; i += 2) m = Max3(m, AmaxKey(v[i]), AmaxKey(v[i + 1]));
  return m;
}

// ---------------------------------------------------------------------------
// The 16-point RHT (common/rht.h's Rht16, bit for bit).
//
// With q_i = fl(v_i * R[i][0]) (R[i][0] = s_i / 4), every product of Rht16 is
// p_ij = fl(v_i * R[i][j]) = H[i][j] * q_i exactly (H = +-1, rounding is sign
// symmetric), and each node of its pairwise tree over i, for output j, is a
// sum of two children that the radix-2 butterfly (strides 1, 2, 4, 8, the
// same pairs in the same order) computes up to the sign of both operands:
// fl(-a - b) = -fl(a + b). So the butterfly gives every output exactly,
// except that a zero may carry the other sign. Under round-to-nearest a sum
// is -0 only if both operands are -0, so an output is -0 exactly when all 16
// of its products are -0 (all q_i zero, each with sign s(q_i) ^ H[i][j]
// negative), and +0 whenever it is zero otherwise. A NaN output is NaN in
// both (inf - inf happens in the same nodes), and RoundToBf16 makes every NaN
// 0x7FC0.
//
// factors[i] = R[i][0] (the kernels keep them in their parameters).

// Bit i of kHadamardNegative[j]: H[i][j] = -1, i.e. popcount(i & j) odd.
EQX_QUANT_HOST_DEVICE constexpr uint32_t HadamardNegativeMask(int j) {
  uint32_t mask = 0;
  for (int i = 0; i < kRhtSize; ++i) {
    int parity = 0;
    for (int b = i & j; b != 0; b >>= 1) parity ^= b & 1;
    mask |= static_cast<uint32_t>(parity) << i;
  }
  return mask;
}

// In place: the first kStages stages (strides 1, 2, 4, 8) of the
// unnormalised Walsh-Hadamard butterfly over 16 values.
template <int kStages = 4>
EQX_QUANT_HOST_DEVICE inline void Butterfly16(float (&q)[kRhtSize]) {
EQX_QUANT_UNROLL
  for (int h = 1; h < (1 << kStages); h *= 2) {
EQX_QUANT_UNROLL
    for (int i = 0; i < kRhtSize; ++i) {
      if ((i & h) == 0) {
        const float a = q[i];
        const float b = q[i + h];
        q[i] = AddRn(a, b);
        q[i + h] = SubRn(a, b);
      }
    }
  }
}

// The bfloat16 bits of two f32 values, lo in the low half: each rounded to
// nearest even with subnormals kept (RoundToBf16). The hardware convert does
// both in one instruction; it makes a NaN 0x7FFF, not 0x7FC0, which no caller
// tells apart (every NaN is dropped from the amax and encodes as code 7
// whatever its bits).
EQX_QUANT_HOST_DEVICE inline uint32_t PackBf16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  uint32_t packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
#else
  return (FloatToBits(RoundToBf16(lo)) >> 16) |
         (FloatToBits(RoundToBf16(hi)) & 0xFFFF0000u);
#endif
}

// RHT(v) as 8 words of bfloat16 bits (== Rht16; output 2k in the low half of
// word k, 2k + 1 in its high half).
//
// kHalfInputs: every v_i is a bf16 or f16 value, so each product v_i R[i][0]
// is exact (no underflow: |v_i| >= 2^-133 or 0), and fma(v_i, R[i][0], +0)
// is it with -0 made +0. With no -0 among the inputs the butterfly makes
// none (a rounded sum is -0 only from -0 operands), so its zero outputs are
// already +0: 16 FFMA instead of 16 FMUL and 16 FADD. Otherwise (f32, where a
// product may round to -0) the outputs are made +0 after the butterfly.
template <bool kHalfInputs = false>
EQX_QUANT_HOST_DEVICE inline void Rht16ExactPacked(
    const float (&v)[kRhtSize], const float* factors,
    uint32_t (&packed)[kRhtSize / 2]) {
  float q[kRhtSize];
  uint32_t magnitudes = 0;
EQX_QUANT_UNROLL
  for (int i = 0; i < kRhtSize; ++i) {
    q[i] = kHalfInputs ? FmaRn(v[i], factors[i], 0.0f) : MulRn(v[i], factors[i]);
    magnitudes |= FloatToBits(q[i]) & kF32Magnitude;
  }
  if (magnitudes == 0) {  // every product is a zero: the signs decide
    uint32_t negative = 0;
EQX_QUANT_UNROLL
    for (int i = 0; i < kRhtSize; ++i) {
      negative |= (FloatToBits(MulRn(v[i], factors[i])) >> 31) << i;
    }
EQX_QUANT_UNROLL
    for (int j = 0; j < kRhtSize; j += 2) {
      const bool lo = (negative ^ HadamardNegativeMask(j)) == 0xFFFFu;
      const bool hi = (negative ^ HadamardNegativeMask(j + 1)) == 0xFFFFu;
      packed[j / 2] = (lo ? 0x8000u : 0u) | (hi ? 0x80000000u : 0u);
    }
    return;
  }
  Butterfly16(q);
EQX_QUANT_UNROLL
  for (int j = 0; j < kRhtSize; j += 2) {
    // fl(z + 0) turns a -0 into +0 and keeps every other value.
    packed[j / 2] = kHalfInputs
                        ? PackBf16x2(q[j], q[j + 1])
                        : PackBf16x2(AddRn(q[j], 0.0f), AddRn(q[j + 1], 0.0f));
  }
}

// out = RHT(v), each output rounded to bfloat16 (== Rht16; see
// Rht16ExactPacked).
template <bool kHalfInputs = false>
EQX_QUANT_HOST_DEVICE inline void Rht16Exact(const float (&v)[kRhtSize],
                                             const float* factors,
                                             float (&out)[kRhtSize]) {
  uint32_t packed[kRhtSize / 2];
  Rht16ExactPacked<kHalfInputs>(v, factors, packed);
EQX_QUANT_UNROLL
  for (int j = 0; j < kRhtSize; j += 2) {
    out[j] = BitsToFloat(packed[j / 2] << 16);
    out[j + 1] = BitsToFloat(packed[j / 2] & 0xFFFF0000u);
  }
}

// max |RHT(v)| over the 16 outputs before their bf16 rounding, NaN ignored.
// Rounding to bf16 is monotone in the magnitude, so the amax of the rounded
// outputs is RoundToBf16 of the max of such maxima. The last stage's pair
// fl(a + b), fl(a - b) has the larger magnitude fl(|a| + |b|) (one of them
// adds the magnitudes, the other subtracts them, and rounding is monotone and
// sign-symmetric; inf - inf gives NaN in one and inf in both forms), so that
// stage is 8 sums of magnitudes.
EQX_QUANT_HOST_DEVICE inline float RhtAbsMax(const float (&v)[kRhtSize],
                                             const float* factors) {
  float q[kRhtSize];
EQX_QUANT_UNROLL
  for (int i = 0; i < kRhtSize; ++i) q[i] = MulRn(v[i], factors[i]);
  Butterfly16<3>(q);
  float m = 0.0f;
EQX_QUANT_UNROLL
  for (int i = 0; i < kRhtSize / 2; ++i) {
    m = fmaxf(m, AddRn(fabsf(q[i]), fabsf(q[i + kRhtSize / 2])));  // NaN-free
  }
  return m;
}

// ---------------------------------------------------------------------------
// Scale bytes.

// e4m3_RN_sat of a non-negative float (== FloatToFp8<E4M3Fn>; the hardware
// convert is checked on all 2^32 inputs by EqxQuantCudaFp8ConvertSelfTest).
EQX_QUANT_HOST_DEVICE inline uint32_t E4M3Byte(float value) {
#if defined(__CUDA_ARCH__)
  uint16_t packed;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
      : "=h"(packed)
      : "f"(0.0f), "f"(value));
  return packed & 0xFFu;
#else
  return FloatToFp8<E4M3Fn>(value);
#endif
}

}  // namespace eqx_quant::cuda::nvfp4

#endif  // EQX_QUANT_CSRC_NVFP4_MATH_CUDA_CUH_
