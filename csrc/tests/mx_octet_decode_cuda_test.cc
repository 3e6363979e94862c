// Host check of cuda/mx_octet_decode.cuh: DecodeOctet (one scale per octet)
// and DecodeOctetScales (a scale per element) against the scalar arithmetic
// ToBf16Bits(Fp8Value(byte) * E8m0Value(scale)) of common/mx_decode.h, both
// FP8 formats:
//   - every (byte, scale) pair at every position of an octet whose other
//     bytes are normal values (so the fast path is taken wherever the pair
//     allows it), with the other scales in range;
//   - 2^20 random octets of random bytes and scales (mostly in range).
// Standalone (from the repository root):
//   g++ -O2 -std=c++17 -ffp-contract=off -I csrc -o /tmp/octet_test
//       csrc/tests/mx_octet_decode_cuda_test.cc && /tmp/octet_test
// Exits non-zero and prints the first mismatches on failure.

#include <cstdint>
#include <cstdio>

#include "common/fp8_format.h"
#include "common/mx_decode.h"
#include "cuda/mx_octet_decode.cuh"

namespace {

using eqx_quant::E4M3Fn;
using eqx_quant::E5M2;
using eqx_quant::E8m0Value;
using eqx_quant::Fp8Value;
using eqx_quant::ToBf16Bits;
using eqx_quant::cuda::DecodeOctet;
using eqx_quant::cuda::DecodeOctetScales;
using eqx_quant::cuda::OctetWords;

uint64_t failures = 0;

uint32_t Byte(uint32_t word, int i) { return (word >> (8 * i)) & 0xFFu; }

uint32_t Element(const OctetWords& o, int t) {
  const uint32_t words[4] = {o.x, o.y, o.z, o.w};
  return (words[t / 2] >> (16 * (t % 2))) & 0xFFFFu;
}

// Checks both decodes of the octet (lo, hi) with the per-element scales
// (slo, shi), and DecodeOctet with the single scale byte 0 of slo.
template <typename Format>
void Check(const char* name, uint32_t lo, uint32_t hi, uint32_t slo, uint32_t shi) {
  const OctetWords per_element = DecodeOctetScales<Format>(lo, hi, slo, shi);
  const OctetWords shared = DecodeOctet<Format>(lo, hi, Byte(slo, 0));
  for (int t = 0; t < 8; ++t) {
    const uint32_t byte = Byte(t < 4 ? lo : hi, t % 4);
    const uint32_t scale = Byte(t < 4 ? slo : shi, t % 4);
    const uint32_t want = ToBf16Bits(Fp8Value<Format>(byte) * E8m0Value(scale));
    const uint32_t want_shared = ToBf16Bits(Fp8Value<Format>(byte) * E8m0Value(Byte(slo, 0)));
    const uint32_t got = Element(per_element, t);
    const uint32_t got_shared = Element(shared, t);
    if ((got != want || got_shared != want_shared) && failures++ < 10) {
      std::printf("%s byte %02x scale %02x (shared %02x) at %d: per-element %04x want %04x, "
                  "shared %04x want %04x\n",
                  name, byte, scale, Byte(slo, 0), t, got, want, got_shared, want_shared);
    }
  }
}

uint32_t Next(uint64_t& state) {  // xorshift64*
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return static_cast<uint32_t>((state * 0x2545F4914F6CDD1Dull) >> 32);
}

template <typename Format>
void Run(const char* name) {
  // Normal bytes of both formats (exponent field 1..14, never a special value).
  const uint32_t normal = 0x3A3A3A3Au;
  const uint32_t scales = 0x80808080u;  // 2^1: in range for both formats
  for (uint32_t byte = 0; byte < 256; ++byte) {
    for (uint32_t scale = 0; scale < 256; ++scale) {
      for (int t = 0; t < 8; ++t) {
        const uint32_t shift = 8 * (t % 4);
        const uint32_t mask = ~(0xFFu << shift);
        uint32_t lo = normal, hi = normal, slo = scales, shi = scales;
        uint32_t& data = t < 4 ? lo : hi;
        uint32_t& s = t < 4 ? slo : shi;
        data = (data & mask) | (byte << shift);
        s = (s & mask) | (scale << shift);
        Check<Format>(name, lo, hi, slo, shi);
        // The shared-scale decode with this scale for the whole octet.
        Check<Format>(name, lo, hi, scale * 0x01010101u, scale * 0x01010101u);
      }
    }
  }
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < (1 << 20); ++i) {
    uint32_t slo = Next(state), shi = Next(state);
    if (i % 4 != 0) {  // scales near 2^0, the usual case
      slo = (slo & 0x1F1F1F1Fu) + 0x70707070u;
      shi = (shi & 0x1F1F1F1Fu) + 0x70707070u;
    }
    Check<Format>(name, Next(state), Next(state), slo, shi);
  }
}

}  // namespace

int main() {
  Run<E4M3Fn>("e4m3");
  Run<E5M2>("e5m2");
  if (failures != 0) {
    std::printf("%llu mismatches\n", static_cast<unsigned long long>(failures));
    return 1;
  }
  std::printf("ok\n");
  return 0;
}
