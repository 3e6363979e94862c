// The stochastic-rounding encoder of the NVFP4 CUDA kernels (the element
// arithmetic of docs/block_formats.md, "Stochastic rounding"): the
// magnitude code of a value and its random byte by one carry out of a sum
// word, four or eight codes at a time, the packed code words of the 16-bit
// row kernels and the panel kernel, and the panel kernel's linear runs of
// octet counters (MakeOctetRuns). Host/device like
// nvfp4/math_cuda.cuh (whose helpers this uses), so that
// the host test (tests/nvfp4_math_cuda_test.cc) compares every
// function here with the CPU kernel's FloatToE2M1Stochastic.

#ifndef EQX_QUANT_CSRC_NVFP4_STOCHASTIC_MATH_CUDA_CUH_
#define EQX_QUANT_CSRC_NVFP4_STOCHASTIC_MATH_CUDA_CUH_

#include <cmath>
#include <cstdint>

#include "common/host_device.h"
#include "common/nvfp4_format.h"
#include "common/threefry.h"
#include "nvfp4/math_cuda.cuh"

namespace eqx_quant::cuda::nvfp4 {

// ceil(x) as uint32 for 0 <= x < 2^32 (larger or NaN: anything).
EQX_QUANT_HOST_DEVICE inline uint32_t CeilToU32(float x) {
#if defined(__CUDA_ARCH__)
  return __float2uint_ru(x);
#else
  return x < 4294967296.0f ? static_cast<uint32_t>(std::ceil(x)) : 0xFFFFFFFFu;
#endif
}

// The word whose top byte is the stochastically rounded magnitude code of
// `value` with the random byte r placed at bits 16..23, `placed` = r << 16
// (E2M1StochasticCode below: X + 2^24 - 1 - (placed | 2^15), < 2^27); a NaN
// gives 7 there, like a >= 6. |value| is a multiply by 1 and 4 * clamped +
// 2^26 a multiply-add by 4, with a 1 that ptxas cannot see (OpaqueOne): FMUL
// and IMAD on the FMA pipe instead of LOP3 and LEA on the ALU pipe, which the
// SR kernels' Threefry calls fill.
EQX_QUANT_HOST_DEVICE inline uint32_t E2M1StochasticSum(float value,
                                                        uint32_t placed) {
  constexpr uint32_t kSix = 0x40C00000u;  // bits of 6.0f
  const uint32_t one = OpaqueOne();
  const float a = MulRn(std::fabs(value), BitsToFloat(0x3F800000u * one));
  const uint32_t magnitude = FloatToBits(a);  // a NaN stays a NaN
  const uint32_t clamped = magnitude < kSix ? magnitude : kSix;
  const uint32_t word = magnitude < 0x3F800000u  // a < 1
                            ? CeilToU32(MulRn(a, 33554432.0f))
                            : clamped * (4u * one) + 0x04000000u;
  return word + (0xFF7FFFu - placed);
}

// == FloatToE2M1Stochastic(value, r) (common/nvfp4_format.h) for every value
// and byte r, in about a third of the instructions (the per-value form: the
// kernels encode four at a time with E2M1StochasticCodes4 below, which the
// host test checks against this one). For a = |value| < 6 the grid
// step s is 0.5 (a < 2), 1 (a < 4) or 2; the code is c + up, c = floor(a / s)
// + (0, 2 or 4), up = R < t with R = r << 16 | 2^15 and t = ceil(frac(a / s)
// * 2^24) (<= 2^24). With the word X = c * 2^24 + t, c + up = (X + 2^24 - 1 -
// R) >> 24: the carry out of the low 24 bits is `up` (and a t of exactly 2^24
// is c + 1, never up: the same code as c, always up). X is
//   a < 1: ceil(a * 2^25) (an exact power-of-two scaling, then the ceiling
//          of t for the a whose low bits fall below 2^-25);
//   1 <= a < 6: 4 * bits(a) + 2^26 (mod 2^32): bits(a) >> 22 = 2 * exponent
//          + the top mantissa bit runs 254..258 for c = 2..6, so 4 * bits(a)
//          holds that minus 256 and + 2^26 adds 4 in bits 24..31; the other
//          22 mantissa bits, times 4, are t;
//   a >= 6 (inf): a clamped to 6, X = 7 * 2^24 (t = 0: never up).
// NaN is the NaN code.
EQX_QUANT_HOST_DEVICE inline uint32_t E2M1StochasticCode(float value,
                                                         uint32_t r) {
  const uint32_t bits = FloatToBits(value);
  uint32_t code = E2M1StochasticSum(value, r << 16) >> 24;
  code |= (bits >> 28) & 0x8u;
  return (bits & 0x7FFFFFFFu) > 0x7F800000u ? uint32_t{kE2M1NanCode} : code;
}

// The codes of four values y (one byte each, y[0] in the low byte) with
// their random bytes, byte e of `rbytes` for y[e]: == Pack4 of
// E2M1StochasticCode(y[e], byte e), in about half of its instructions: each
// byte is moved to bits 16..23 by one byte permute, the four magnitude codes
// are the top bytes of the E2M1StochasticSum words and the signs the top
// bits of the values, each gathered by byte permutes (3 + 3 PRMT, one shift
// and one LOP3 for the four, where E2M1StochasticCode spends 5 instructions
// per value and Pack4 5 more). A NaN's magnitude code is already 7; its sign
// bit is cleared only when `may_have_nan` (the caller's block or lane holds a
// NaN).
EQX_QUANT_HOST_DEVICE inline uint32_t E2M1StochasticCodes4(const float (&y)[4],
                                                           uint32_t rbytes,
                                                           bool may_have_nan) {
  // Byte e of rbytes at bits 16..23, zeros elsewhere (selector nibbles:
  // output bytes 0, 1 and 3 from byte 0 of the zero operand).
  auto placed = [rbytes](uint32_t e) {
    return BytePerm(rbytes, 0u, 0x4044u | (e << 8));
  };
  // (TopBytes4 on the sums, written out: the call would change the SR
  // kernels' instruction order.)
  const uint32_t s01 = BytePerm(E2M1StochasticSum(y[0], placed(0)),
                                E2M1StochasticSum(y[1], placed(1)), 0x0073u);
  const uint32_t s23 = BytePerm(E2M1StochasticSum(y[2], placed(2)),
                                E2M1StochasticSum(y[3], placed(3)), 0x0073u);
  uint32_t q = BytePerm(s01, s23, 0x5410u) | SignBits4(y[0], y[1], y[2], y[3]);
  if (may_have_nan) {
    uint32_t nan_signs = 0;
EQX_QUANT_UNROLL
    for (int e = 0; e < 4; ++e) {
      const bool nan = (FloatToBits(y[e]) & 0x7FFFFFFFu) > 0x7F800000u;
      nan_signs |= nan ? 0x8u << (8 * e) : 0u;
    }
    q &= ~nan_signs;
  }
  return q;
}

// The magnitude nibbles of 8 values y (nibble e: the stochastically rounded
// magnitude code of y[e] with the random byte e % 4 of rbytes[e / 4]; a NaN
// gives 7): == the low 3 bits of E2M1StochasticCode(y[e], byte) in nibble
// e. The codes are the top bytes of the E2M1StochasticSum words; TopBytes4
// gathers the even elements' into one word and the odd ones' into another,
// and one multiply-add (IMAD, the FMA pipe) puts each pair side by side in a
// byte (codes <= 7): 6 PRMT + 1 IMAD for the 8, where E2M1StochasticCodes4
// and PackNibbles8 spend about 11.
EQX_QUANT_HOST_DEVICE inline uint32_t E2M1StochasticMagnitudes8(
    const float (&y)[8], const uint32_t (&rbytes)[2]) {
  uint32_t top[8];  // code of y[e] in bits 24..31 (E2M1StochasticSum)
EQX_QUANT_UNROLL
  for (int e = 0; e < 8; ++e) {
    // Byte e % 4 of rbytes[e / 4] at bits 16..23, zeros elsewhere.
    const uint32_t placed = BytePerm(rbytes[e / 4], 0u,
                                     0x4044u | (static_cast<uint32_t>(e % 4) << 8));
    top[e] = E2M1StochasticSum(y[e], placed);
  }
  const uint32_t even = TopBytes4(top[0], top[2], top[4], top[6]);
  const uint32_t odd = TopBytes4(top[1], top[3], top[5], top[7]);
  return odd * (16u * OpaqueOne()) + even;
}

// The code word of 8 NaN-free values y (nibble e: the stochastically
// rounded code of y[e] with the random byte e % 4 of rbytes[e / 4]) whose
// signs are those of the 8 values of w (y = v * enc with enc > 0): == the
// nibbles of E2M1StochasticCode(y[e], byte). The signs by SignNibbles8 (4
// PRMT + 2 LOP3; E2M1StochasticCodes4 spends about 10 on them)
// (RowHalfSrKernel, the panel kernel's rowwise part).
EQX_QUANT_HOST_DEVICE inline uint32_t E2M1StochasticWord8(
    const float (&y)[8], const uint32_t (&rbytes)[2], const uint32_t (&w)[4]) {
  return SignNibbles8(w, E2M1StochasticMagnitudes8(y, rbytes));
}

// The same with the signs of y itself (values computed in f32, e.g. the
// RHT's outputs): their top bytes gathered like the magnitudes', the even
// elements' sign bits shifted to bit 3 of each byte (6 PRMT, 1 shift, 2
// LOP3) (the panel kernel's colwise part).
EQX_QUANT_HOST_DEVICE inline uint32_t E2M1StochasticWord8Signed(
    const float (&y)[8], const uint32_t (&rbytes)[2]) {
  auto tops = [&y](int e0) {  // top bytes of y[e0], y[e0 + 2], .., y[e0 + 6]
    return TopBytes4(FloatToBits(y[e0]), FloatToBits(y[e0 + 2]),
                     FloatToBits(y[e0 + 4]), FloatToBits(y[e0 + 6]));
  };
  return (E2M1StochasticMagnitudes8(y, rbytes) |
          ((tops(0) >> 4) & 0x08080808u)) |
         (tops(1) & 0x80808080u);
}

// kRuns runs of 8 * kOctets elements with consecutive indices (SrRunBytes's
// runs of N = 8 * kOctets) on consecutive coordinates of one dim of S (the
// panel kernel's 16 rows of a 16-byte vector rowwise, its 8 columns
// colwise): element e of run r has the index base + uint64(shifted + r) *
// stride + uint32(last + e), shifted = uint32(coord0) + uint32(offset_d),
// as SrTerm and SrRunBytes take them. Where every run starts an octet and
// the counters step by a constant in their low word (`linear`: no 32-bit
// wrap of shifted + r or of last + e, the first index and the stride
// multiples of 8, no carry out of the low word over the runs), run r's bytes
// are the words of the Threefry calls on (lo + r * step + o, hi), o <
// kOctets: what SrRunBytes computes for it, with the index arithmetic once
// per thread instead of once per run (tests/nvfp4_math_cuda_test.cc
// checks the counters against the indices).
struct OctetRuns {
  bool linear;
  uint32_t lo;    // run 0's first counter, low word
  uint32_t hi;    // every counter's high word (with the stream bit)
  uint32_t step;  // the low word's step from run to run
};

template <int kRuns, int kOctets>
EQX_QUANT_HOST_DEVICE inline OctetRuns MakeOctetRuns(uint32_t shifted,
                                                   uint64_t stride,
                                                   uint64_t base,
                                                   uint32_t last,
                                                   uint32_t stream) {
  const uint64_t first = base + static_cast<uint64_t>(shifted) * stride + last;
  const uint64_t octet = first >> 3;
  const uint64_t step = stride >> 3;
  OctetRuns runs;
  runs.linear = shifted <= 0xFFFFFFFFu - (kRuns - 1) &&
                last <= 0xFFFFFFFFu - (8 * kOctets - 1) && (first & 7u) == 0 &&
                (stride & 7u) == 0 && step <= 0xFFFFFFFFu &&
                (octet & 0xFFFFFFFFu) + uint64_t{kRuns - 1} * step +
                        (kOctets - 1) <=
                    0xFFFFFFFEu;
  runs.lo = static_cast<uint32_t>(octet);
  runs.hi = StochasticRoundingCounterHigh(octet, stream);
  runs.step = static_cast<uint32_t>(step);
  return runs;
}

}  // namespace eqx_quant::cuda::nvfp4

#endif  // EQX_QUANT_CSRC_NVFP4_STOCHASTIC_MATH_CUDA_CUH_
