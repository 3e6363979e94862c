// Host unit test of the NVFP4 CUDA kernels' arithmetic (nvfp4/math_cuda.cuh,
// nvfp4/stochastic_math_cuda.cuh: host/device functions) against the CPU
// kernel's helpers (common/nvfp4_format.h, common/rht.h). Not part of the
// library; build and run by hand from the repository root:
//
//   g++ -std=c++17 -O2 -ffp-contract=off -Wall -Wextra
//       -I csrc csrc/tests/nvfp4_math_cuda_test.cc -o /tmp/nv_math
//   /tmp/nv_math          # every 97th float for the encoder (seconds)
//   /tmp/nv_math full     # every float bit pattern (~5 min)
//
// It checks, bit for bit:
//   * E2M1Magnitude(a) == FloatToE2M1(a) for non-negative non-NaN a (every
//     one with `full`) and around every rounding boundary and magic number;
//   * EncodeFast<16> / EncodeFast<8> (sign bits, byte packing) ==
//     EncodeExact<16> == FloatToE2M1(fl(v * enc)) per element, on 2M random
//     NaN-free blocks (subnormals, infinities, zeros of both signs, extreme
//     multipliers), and RawKey == NanFreeKey there;
//   * the packed 16-bit path (HalfMagnitudeMax, FoldHalves, CodeWord8 and
//     CodeWord8Scaled from MulSatRn(|v|, enc / 8)) ==
//     RawKey and FloatToE2M1 of the unpacked bf16 / f16 values, on 2M random
//     words (zeros, subnormals, infinities, max finite; NaN detection), and
//     E2M1StochasticWord8 and E2M1StochasticWord8Signed ==
//     FloatToE2M1Stochastic of fl(v * enc) with random bytes there;
//   * E2M1StochasticCode(v, r) == FloatToE2M1Stochastic(v, r) for every
//     97th bit pattern of v (every one with `full`) with the random byte r
//     around the rounding threshold, 0, 255 and random, and around every
//     grid point; E2M1StochasticCodes4 == Pack4 of E2M1StochasticCode;
//   * Rht16Exact == Rht16 (the pairwise-sum matrix product, each output
//     rounded to bf16), and Rht16Exact<true> on the same groups made bf16 /
//     f16 values, on 3M groups: all-zero groups of mixed signs (the -0
//     rule), tiny subnormals whose products underflow, exact cancellations,
//     NaN, inf, overflow; and RoundToBf16(RhtAbsMax) == the NaN-ignoring max
//     of AmaxKey over Rht16's outputs; random sign masks and the default;
//   * MakeOctetRuns: where it reports `linear`, every element's counter
//     (its index >> 3: low word, high word with the stream bit) and byte
//     position (index & 7) are those its runs assume, on 2M random layouts
//     biased to the 32-bit wraps, strides not multiples of 8, 64-bit wraps
//     and low words near 2^32; and the usual layouts are linear.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

#include "nvfp4/math_cuda.cuh"
#include "nvfp4/stochastic_math_cuda.cuh"

namespace {

using eqx_quant::BitsToFloat;
using eqx_quant::FloatToBits;
using eqx_quant::RhtMatrix;
namespace nv = eqx_quant::cuda::nvfp4;

uint64_t failures = 0;

void Check(bool ok, const char* what, uint32_t a = 0, uint32_t b = 0,
           uint32_t c = 0) {
  if (ok) return;
  if (failures++ < 20) {
    std::printf("FAIL %s: %08x %08x %08x\n", what, a, b, c);
  }
}

class Random {
 public:
  explicit Random(uint64_t seed) : engine_(seed) {}
  uint32_t Bits() { return static_cast<uint32_t>(engine_()); }
  uint32_t Below(uint32_t n) { return Bits() % n; }
  float Sign() { return Below(2) ? -1.0f : 1.0f; }
  // An encode multiplier (> 0, finite): the f32 maximum, any bit pattern,
  // 1.xxx x 2^[-30, 30); with `powers_of_two` also 2^[-20, 20) (exact
  // products: the ties of the E2M1 grid).
  float Multiplier(bool powers_of_two) {
    switch (Below(powers_of_two ? 5 : 4)) {
      case 0: return 3.4028235e38f;
      case 1: {
        const float enc = BitsToFloat((Bits() & 0x7FFFFFFFu) % 0x7F800000u);
        return enc == 0.0f ? 1.0f : enc;
      }
      case 4: return std::ldexp(1.0f, static_cast<int>(Below(40)) - 20);
      default:
        return std::ldexp(1.0f + static_cast<float>(Below(1000)) / 1000.0f,
                          static_cast<int>(Below(60)) - 30);
    }
  }
  // Zeros, subnormals, infinities, powers of two, wide normals.
  float Special() {
    switch (Below(12)) {
      case 0: return 0.0f;
      case 1: return -0.0f;
      case 2: return BitsToFloat(Bits() & 0x807FFFFFu);
      case 3: return BitsToFloat(0x7F800000u | (Bits() & 0x80000000u));
      case 4:
        return Sign() * std::ldexp(1.0f, static_cast<int>(Below(40)) - 20);
      default: {
        std::normal_distribution<float> normal(0.0f, 3.0f);
        return normal(engine_) *
               std::ldexp(1.0f, static_cast<int>(Below(24)) - 12);
      }
    }
  }

 private:
  std::mt19937_64 engine_;
};

// E2M1Magnitude == FloatToE2M1 on non-negative non-NaN floats.
void CheckMagnitudes(bool full) {
  const uint64_t step = full ? 1 : 97;
  for (uint64_t b = 0; b <= 0x7F800000u; b += step) {
    const float a = BitsToFloat(static_cast<uint32_t>(b));
    Check(nv::E2M1Magnitude(a) == eqx_quant::FloatToE2M1(a), "magnitude",
          static_cast<uint32_t>(b));
  }
  const uint32_t edges[] = {
      0x3E800000, 0x3F400000, 0x3FA00000, 0x3FE00000, 0x40200000,
      0x40600000, 0x40A00000, 0x40C00000, 0x40000000, 0x40800000,
      0x3F800000, 0x4A800000, 0x4B000000, 0x4B800000, 0x7F7FFFFF,
      0x7F800000, 0x00000000, 0x00000001};
  for (uint32_t edge : edges) {
    for (int d = -3; d <= 3; ++d) {
      const uint32_t b = edge + static_cast<uint32_t>(d);
      if (b > 0x7F800000u) continue;
      Check(nv::E2M1Magnitude(BitsToFloat(b)) ==
                eqx_quant::FloatToE2M1(BitsToFloat(b)),
            "magnitude edge", b);
    }
  }
}

// EncodeFast (signs, packing) == EncodeExact == FloatToE2M1 per element.
void CheckEncoders(Random& rng) {
  for (int it = 0; it < 2000000; ++it) {
    float v[16];
    bool has_nan = false;
    for (float& x : v) {
      x = rng.Below(4) == 0 ? rng.Special()
                            : BitsToFloat(rng.Bits() & 0xFF7FFFFFu);
      has_nan |= x != x;
    }
    if (has_nan) continue;
    const float enc = rng.Multiplier(/*powers_of_two=*/false);
    uint32_t fast[4];
    uint32_t exact[4];
    nv::EncodeFast<16>(v, enc, fast);
    nv::EncodeExact<16>(v, enc, exact);
    for (int w = 0; w < 4; ++w) {
      Check(fast[w] == exact[w], "encode", fast[w], exact[w]);
    }
    for (int e = 0; e < 16; ++e) {
      const uint32_t code = (exact[e / 4] >> (8 * (e % 4))) & 0xFFu;
      Check(code == eqx_quant::FloatToE2M1(v[e] * enc), "encode element",
            FloatToBits(v[e]), FloatToBits(enc), code);
    }
    float half[8];
    for (int e = 0; e < 8; ++e) half[e] = v[e];
    uint32_t fast8[2];
    nv::EncodeFast<8>(half, enc, fast8);
    Check(fast8[0] == fast[0] && fast8[1] == fast[1], "encode 8");
    Check(nv::RawKey<16>(v) == nv::NanFreeKey<16>(v), "keys");
  }
  float v[16] = {};
  v[3] = BitsToFloat(0xFFC00001u);
  v[5] = 2.0f;
  Check(nv::RawKey<16>(v) > nv::kF32Inf &&
            nv::NanFreeKey<16>(v) == FloatToBits(2.0f),
        "keys with NaN");
}

// RowHalfKernel's packed 16-bit path: the key from HalfMagnitudeMax /
// FoldHalves == RawKey of the unpacked values (NaN: above the format's inf),
// and CodeWord8 == the nibbles FloatToE2M1(fl(v * enc)), bf16 and f16;
// RowHalfSrKernel's E2M1StochasticWord8 == the nibbles of
// FloatToE2M1Stochastic(fl(v * enc), byte) for random bytes.
void CheckHalfWords(Random& rng) {
  int paired = 0;
  for (int it = 0; it < 2000000; ++it) {
    const bool f16 = it % 2 == 1;
    const uint32_t inf = f16 ? 0x7C00u : 0x7F80u;
    auto to_float = [f16](uint32_t h) {
      return f16 ? eqx_quant::F16BitsToFloat(static_cast<uint16_t>(h))
                 : eqx_quant::Bf16BitsToFloat(static_cast<uint16_t>(h));
    };
    uint32_t w[4];
    float v[8];
    bool has_nan = false;
    for (int e = 0; e < 8; ++e) {
      uint32_t h = rng.Bits() & 0xFFFFu;
      switch (rng.Below(8)) {
        case 0: h &= 0x8000u; break;                        // zeros
        case 1: h = (h & 0x8000u) | inf; break;             // infinities
        case 2: h &= f16 ? 0x83FFu : 0x807Fu; break;        // subnormals
        case 3: h = (h & 0x8000u) | (inf - 1); break;       // max finite
        default: break;
      }
      if (rng.Below(64) != 0 && (h & 0x7FFFu) > inf) h &= 0x8000u | (inf - 1);
      has_nan |= (h & 0x7FFFu) > inf;
      v[e] = to_float(h);
      if (e % 2 == 0) {
        w[e / 2] = h;
      } else {
        w[e / 2] |= h << 16;
      }
    }
    const uint32_t key16 = nv::FoldHalves(nv::HalfMagnitudeMax(w)) & 0xFFFFu;
    Check((key16 > inf) == has_nan, "half key nan", key16, w[0], w[1]);
    if (has_nan) continue;
    const float key = to_float(key16);
    Check(FloatToBits(key) == nv::RawKey<8>(v), "half key", key16, w[0], w[1]);
    const float enc = rng.Multiplier(/*powers_of_two=*/true);
    float a[8];
    uint32_t want = 0;
    for (int e = 0; e < 8; ++e) {
      a[e] = std::fabs(v[e]) * enc;
      want |= static_cast<uint32_t>(eqx_quant::FloatToE2M1(v[e] * enc)) << (4 * e);
    }
    Check(nv::CodeWord8(a, w) == want, "half code word", want,
          nv::CodeWord8(a, w), FloatToBits(enc));
    // The stochastically rounded word (RowHalfSrKernel) from y = fl(v * enc).
    const uint32_t rbytes[2] = {rng.Bits(), rng.Bits()};
    float y[8];
    uint32_t want_sr = 0;
    for (int e = 0; e < 8; ++e) {
      y[e] = v[e] * enc;
      const uint32_t r = (rbytes[e / 4] >> (8 * (e % 4))) & 0xFFu;
      want_sr |= static_cast<uint32_t>(
                     eqx_quant::FloatToE2M1Stochastic(y[e], r)) << (4 * e);
    }
    Check(nv::E2M1StochasticWord8(y, rbytes, w) == want_sr,
          "half stochastic word", want_sr, nv::E2M1StochasticWord8(y, rbytes, w),
          FloatToBits(enc));
    Check(nv::E2M1StochasticWord8Signed(y, rbytes) == want_sr,
          "signed stochastic word", want_sr,
          nv::E2M1StochasticWord8Signed(y, rbytes), FloatToBits(enc));
    // The paired form, where enc / 8 is exact (a normal number).
    const float enc8 = enc * 0.125f;
    if (nv::EighthIsExact(enc)) {
      float sat[8];
      for (int e = 0; e < 8; ++e) sat[e] = nv::MulSatRn(std::fabs(v[e]), enc8);
      Check(nv::CodeWord8Scaled(sat, w) == want, "half code word, pairs", want,
            nv::CodeWord8Scaled(sat, w), FloatToBits(enc));
      ++paired;
    }
  }
  Check(paired > 1000000, "paired cases run");
}

// An f16 value near x: x rounded to 11 significant bits (NaN and inf kept),
// magnitudes past f16's max made inf and those below its smallest subnormal
// 2^-24 rounded to a multiple of it.
float ToF16Value(float x) {
  if (std::isnan(x) || std::isinf(x)) return x;
  const float a = std::fabs(x);
  if (a >= 65520.0f) return std::copysign(INFINITY, x);
  if (a < std::ldexp(1.0f, -14)) {  // subnormal: multiples of 2^-24
    return std::copysign(std::nearbyint(std::ldexp(a, 24)) * std::ldexp(1.0f, -24),
                         x);
  }
  int e;
  const float f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  return std::copysign(std::ldexp(std::nearbyint(std::ldexp(f, 11)), e - 11), x);
}

// Rht16Exact == Rht16 (also Rht16Exact<true> on bf16 / f16 values);
// RoundToBf16(RhtAbsMax) == max AmaxKey of Rht16.
void CheckRht(Random& rng) {
  for (int it = 0; it < 3000000; ++it) {
    const uint32_t mask = it % 3 == 0 ? 0xD7E8u : (rng.Bits() & 0xFFFFu);
    const RhtMatrix m = eqx_quant::MakeRhtMatrix(mask);
    float factors[16];
    for (int i = 0; i < 16; ++i) factors[i] = m.col[0][i];
    const uint32_t kind = rng.Below(8);
    float v[16];
    for (float& x : v) {
      switch (kind) {
        case 0: x = rng.Sign() * 0.0f; break;  // zero groups: the -0 rule
        case 1: x = BitsToFloat(rng.Bits() & 0x80000003u); break;  // underflow
        case 2:
          x = rng.Below(4) == 0 ? rng.Special()
                                : BitsToFloat(rng.Bits() & 0x80000003u);
          break;
        case 3:  // exact cancellations
          x = static_cast<float>(static_cast<int>(rng.Below(5)) - 2);
          break;
        case 4:
          x = rng.Below(8) == 0 ? BitsToFloat(0x7FC00000u | rng.Bits())
                                : rng.Special();
          break;
        case 5: x = rng.Sign() * 3.0e38f; break;  // overflow to inf
        default: x = rng.Special();
      }
    }
    // The same values as 16-bit ones (bf16: the top half of the bits; f16:
    // rounded to 11 significant bits and clamped to f16's range, its
    // subnormals included) for the kHalfInputs form.
    float half[16];
    const bool as_f16 = it % 2 == 1;
    for (int i = 0; i < 16; ++i) {
      if (as_f16) {
        half[i] = ToF16Value(v[i]);
      } else {
        // Through memcpy: g++ 12 -O2 dropped the mask from
        // BitsToFloat(FloatToBits(v[i]) & 0xFFFF0000u) on subnormal v here.
        uint32_t bits;
        std::memcpy(&bits, &v[i], sizeof(bits));
        bits &= 0xFFFF0000u;
        std::memcpy(&half[i], &bits, sizeof(bits));
      }
    }
    float want[16];
    float got[16];
    float want_half[16];
    float got_half[16];
    eqx_quant::Rht16(m, v, want);
    nv::Rht16Exact(v, factors, got);
    eqx_quant::Rht16(m, half, want_half);
    nv::Rht16Exact<true>(half, factors, got_half);
    for (int j = 0; j < 16; ++j) {
      Check(FloatToBits(want[j]) == FloatToBits(got[j]), "rht",
            FloatToBits(want[j]), FloatToBits(got[j]), kind);
      Check(FloatToBits(want_half[j]) == FloatToBits(got_half[j]), "rht 16-bit",
            FloatToBits(want_half[j]), FloatToBits(got_half[j]), kind);
    }
    uint32_t key = 0;
    for (float w : want) key = std::max(key, eqx_quant::AmaxKey(w));
    Check(FloatToBits(eqx_quant::RoundToBf16(nv::RhtAbsMax(v, factors))) == key,
          "rht amax", key, kind);
  }
}

}  // namespace

// E2M1StochasticCode == FloatToE2M1Stochastic: every 97th bit pattern (all
// with `full`), both signs, NaN and inf included, each with a random byte
// and the bytes around the value's rounding threshold (where `up` flips),
// and around every grid point and step change.
void CheckStochastic(bool full, Random& rng) {
  auto check = [&](uint32_t b, uint32_t r) {
    const float v = BitsToFloat(b);
    Check(nv::E2M1StochasticCode(v, r) == eqx_quant::FloatToE2M1Stochastic(v, r),
          "stochastic", b, r);
  };
  auto around_threshold = [&](uint32_t b) {
    // The byte where up flips (if the formula is right): about frac * 256
    // - 1/2, from the threshold ceil(frac * 2^24) in the low 24 bits of X.
    const uint32_t magnitude = b & 0x7FFFFFFFu;
    const float per_step = magnitude < 0x40000000u   ? 33554432.0f
                           : magnitude < 0x40800000u ? 16777216.0f
                                                     : 8388608.0f;
    const uint32_t t = nv::CeilToU32(BitsToFloat(magnitude) * per_step);
    const uint32_t edge = (t & 0xFFFFFFu) >> 16;
    for (int d = -2; d <= 2; ++d) {
      check(b, (edge + static_cast<uint32_t>(d)) & 0xFFu);
    }
    check(b, 0u);
    check(b, 0xFFu);
    check(b, rng.Bits() & 0xFFu);
  };
  const uint64_t step = full ? 1 : 97;
  for (uint64_t b = 0; b <= 0xFFFFFFFFu; b += step) {
    around_threshold(static_cast<uint32_t>(b));
  }
  for (uint32_t edge = 0x3E800000u; edge <= 0x40C00000u; edge += 0x00400000u) {
    for (int d = -4; d <= 4; ++d) {
      around_threshold(edge + static_cast<uint32_t>(d));
      around_threshold((edge + static_cast<uint32_t>(d)) | 0x80000000u);
    }
  }
  for (int i = 0; i < 1000000; ++i) around_threshold(rng.Bits());
  // Every byte on every value whose fractional position in its binade is a
  // multiple of 2^-9, the ties of the rule ((r + 1/2) / 256 == frac never
  // rounds up) included: m / 1024 (step 0.5), m / 512 (step 1 from 2) and
  // m / 256 (step 2 from 4).
  for (uint32_t r = 0; r < 256; ++r) {
    for (uint32_t m = 0; m < 2048; ++m) {
      const float v = static_cast<float>(m) / 1024.0f;
      for (float scale : {1.0f, 2.0f, 4.0f}) {
        check(FloatToBits(v * scale), r);
        check(FloatToBits(v * scale) | 0x80000000u, r);
      }
    }
  }
}

// E2M1StochasticCodes4 == Pack4 of E2M1StochasticCode (byte e of a random
// word for value e) over words of four values drawn from one pool (both signs of zeros, subnormals, grid points,
// thresholds, >= 6, inf, NaNs of both signs, random bits), with NaNs only
// where `may_have_nan` says so; and with it set where none is.
void CheckStochastic4(Random& rng) {
  const uint32_t pool[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu,
                           0x3E800000u, 0x3E800001u, 0x3F400000u, 0x3F7FFFFFu,
                           0x3F800000u, 0x3FA00000u, 0x40000000u, 0x40200000u,
                           0x40600000u, 0x40A00000u, 0x40BFFFFFu, 0x40C00000u,
                           0x40C00001u, 0x7F7FFFFFu, 0x7F800000u, 0xFF800000u,
                           0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu};
  constexpr int kPool = sizeof(pool) / sizeof(pool[0]);
  for (int i = 0; i < 2000000; ++i) {
    float y[4];
    const uint32_t rbytes = rng.Bits();
    bool nan = false;
    for (int e = 0; e < 4; ++e) {
      const uint32_t pick = rng.Bits();
      const uint32_t b = pick % 4 == 0 ? rng.Bits()
                                       : pool[(pick >> 2) % kPool] ^
                                             ((pick >> 8) & 1u ? 0x80000000u : 0u);
      y[e] = BitsToFloat(b);
      nan = nan || (b & 0x7FFFFFFFu) > 0x7F800000u;
    }
    const uint32_t want = nv::Pack4(
        nv::E2M1StochasticCode(y[0], rbytes & 0xFFu),
        nv::E2M1StochasticCode(y[1], (rbytes >> 8) & 0xFFu),
        nv::E2M1StochasticCode(y[2], (rbytes >> 16) & 0xFFu),
        nv::E2M1StochasticCode(y[3], rbytes >> 24));
    Check(nv::E2M1StochasticCodes4(y, rbytes, nan) == want, "stochastic4",
          nv::E2M1StochasticCodes4(y, rbytes, nan), want);
    Check(nv::E2M1StochasticCodes4(y, rbytes, true) == want,
          "stochastic4 nan", nv::E2M1StochasticCodes4(y, rbytes, true), want);
  }
}

// MakeOctetRuns<kRuns, kOctets>: when linear, element e < 8 kOctets of run r
// < kRuns has the index base + uint64(uint32(shifted + r)) * stride +
// uint32(last + e) (SrRunBytes's definition), whose octet must be the
// counter (lo + r * step + e / 8, hi) and whose position in it e % 8.
template <int kRuns, int kOctets>
void CheckOctetRunsOf(uint32_t shifted, uint64_t stride, uint64_t base,
                      uint32_t last, uint32_t stream) {
  const nv::OctetRuns runs =
      nv::MakeOctetRuns<kRuns, kOctets>(shifted, stride, base, last, stream);
  if (!runs.linear) return;
  for (int r = 0; r < kRuns; ++r) {
    const uint32_t coord = shifted + static_cast<uint32_t>(r);
    const uint64_t row = base + static_cast<uint64_t>(coord) * stride;
    for (int e = 0; e < 8 * kOctets; ++e) {
      const uint64_t index = row + (last + static_cast<uint32_t>(e));
      const uint64_t octet = index >> 3;
      const uint32_t lo = runs.lo + static_cast<uint32_t>(r) * runs.step +
                          static_cast<uint32_t>(e / 8);
      Check(static_cast<uint32_t>(octet) == lo, "octet runs: low word",
            static_cast<uint32_t>(octet), lo, static_cast<uint32_t>(r));
      Check(eqx_quant::StochasticRoundingCounterHigh(octet, stream) == runs.hi,
            "octet runs: high word", static_cast<uint32_t>(octet >> 32),
            runs.hi, static_cast<uint32_t>(r));
      Check((index & 7u) == static_cast<uint64_t>(e % 8),
            "octet runs: position", static_cast<uint32_t>(index & 7u),
            static_cast<uint32_t>(e), static_cast<uint32_t>(r));
    }
  }
}

void CheckOctetRuns(Random& rng) {
  auto near_top = [&](uint32_t span) { return 0xFFFFFFFFu - rng.Below(span); };
  auto wide = [&]() {
    return (static_cast<uint64_t>(rng.Bits()) << 32) | rng.Bits();
  };
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t shifted =
        rng.Below(3) == 0 ? near_top(40) : rng.Bits() >> rng.Below(32);
    uint64_t stride;
    switch (rng.Below(6)) {
      case 0: stride = 8 * uint64_t{rng.Below(1u << 20)}; break;
      case 1: stride = 8 * (uint64_t{1} << 32) - 8 * rng.Below(4); break;
      case 2: stride = (uint64_t{1} << 31) + 1; break;
      case 3: stride = wide(); break;
      case 4: stride = 8 * uint64_t{0xFFFFFFFFu - rng.Below(20)}; break;
      default: stride = uint64_t{rng.Below(4096)} + 1; break;
    }
    uint64_t base = rng.Below(2) ? wide() : 8 * uint64_t{rng.Bits()};
    if (rng.Below(4) == 0) base &= ~uint64_t{7};
    // A third near 2^32; the rest multiples of 8 (the usual layouts), half
    // of them moved by 0..7.
    const uint32_t misaligned = rng.Below(2) * rng.Below(8);
    const uint32_t last = rng.Below(3) == 0
                              ? near_top(40)
                              : 8 * rng.Below(1u << 20) + misaligned;
    const uint32_t stream = rng.Below(2);
    CheckOctetRunsOf<16, 1>(shifted, stride, base, last, stream);
    CheckOctetRunsOf<8, 2>(shifted, stride, base, last, stream);
  }
  // The usual layouts take the linear counters: a bf16 8192 x 8192 tensor's
  // rows (stride 8192) and its T layout's columns (stride 8192), both
  // streams, at the start and near the end of the tensor.
  for (uint32_t stream = 0; stream < 2; ++stream) {
    for (uint32_t k : {0u, 8176u}) {
      Check(nv::MakeOctetRuns<16, 1>(k, 8192, 0, 64, stream).linear,
            "octet runs: rows linear", k);
      Check(nv::MakeOctetRuns<8, 2>(k, 8192, 0, k, stream).linear,
            "octet runs: columns linear", k);
    }
  }
}

int main(int argc, char** argv) {
  const bool full = argc > 1 && std::strcmp(argv[1], "full") == 0;
  Random rng(1);
  CheckMagnitudes(full);
  CheckEncoders(rng);
  CheckHalfWords(rng);
  CheckRht(rng);
  CheckStochastic(full, rng);
  CheckStochastic4(rng);
  CheckOctetRuns(rng);
  Check(nv::BytePerm(0x33221100u, 0x77665544u, 0x7531u) == 0x77553311u,
        "byte perm");
  Check(nv::HadamardNegativeMask(0) == 0 &&
            nv::HadamardNegativeMask(1) == 0xAAAAu &&
            nv::HadamardNegativeMask(15) == 0x6996u,
        "hadamard masks");
  std::printf("%s: %llu failures\n", failures ? "FAILED" : "OK",
              static_cast<unsigned long long>(failures));
  return failures != 0;
}
