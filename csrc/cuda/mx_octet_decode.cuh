// The exact decode of 8 MXFP8 payload bytes to bfloat16 bits, shared by the
// dequantize kernels (mxfp8/dequantize_cuda.cu, grouped/dequantize_cuda.cu):
// ToBf16Bits(Fp8Value(byte) * E8m0Value(scale)) for each byte
// (common/mx_decode.h), bit for bit.
//
// When every byte is a normal FP8 value or zero and its block's scale
// 2^(e-127) keeps every product a normal float32, the product needs no
// rounding (4 significant bits at most, exact in bfloat16 too), so its
// bfloat16 bits are the byte's exponent and mantissa moved into place plus
// (e - bias) << 7, two elements per 32-bit integer operation. An octet with a
// subnormal, NaN or infinity byte, or a scale outside that range, takes the
// scalar reference arithmetic.
//
// Host code too (no CUDA types outside nvcc): the host test
// csrc/tests/mx_octet_decode_cuda_test.cc checks both decodes against the
// scalar arithmetic on every (byte, scale) pair.

#ifndef EQX_QUANT_CSRC_CUDA_MX_OCTET_DECODE_CUH_
#define EQX_QUANT_CSRC_CUDA_MX_OCTET_DECODE_CUH_

#include <cstdint>

#include "common/host_device.h"
#include "common/mx_decode.h"

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace eqx_quant::cuda {

// The 4 words of 2 bfloat16 values each of a decoded octet (element 0 in the
// low half of x): a uint4 under nvcc, ready for one 16-byte store.
#if defined(__CUDACC__)
using OctetWords = uint4;
#else
struct OctetWords {
  uint32_t x, y, z, w;
};
#endif

// Bit 7 of each byte of `w` set where the byte is an FP8 subnormal, NaN or
// infinity (the bytes the fast decode cannot take), the other bits 0. Byte
// sums stay below 0x100, so no carry crosses into the next byte.
template <typename Format>
EQX_QUANT_HOST_DEVICE inline uint32_t SpecialBytes(uint32_t w) {
  constexpr int kMan = Format::kMantissaBits;
  constexpr uint32_t kOnes = 0x01010101u;
  const uint32_t mag = w & 0x7F7F7F7Fu;
  // exponent field != 0 (mag >= 1 << kMan)
  const uint32_t exp_set = mag + (0x80u - (1u << kMan)) * kOnes;
  // mantissa field != 0
  const uint32_t man_set = (w & ((1u << kMan) - 1) * kOnes) + 0x7Fu * kOnes;
  // e4m3fn: 0x7F, its only NaN; e5m2: exponent 31 (infinities and NaNs)
  const uint32_t top = mag + (kMan == 3 ? 1u : 1u << kMan) * kOnes;
  return ((man_set & ~exp_set) | top) & 0x80808080u;
}

// Whether scale byte e keeps (e - bias) + every normal exponent field of
// Format in [1, 254]: 1 <= exponent - bias + e <= 254, so that the product of
// every normal byte is a normal float32.
template <typename Format>
EQX_QUANT_HOST_DEVICE inline bool ScaleFits(uint32_t e) {
  constexpr uint32_t kBias = Format::kExponentBias;
  // The largest normal exponent field: 15 (e4m3fn, 0x7E) or 30 (e5m2).
  constexpr uint32_t kMaxExponent = Format::kMantissaBits == 3 ? 15 : 30;
  return e >= kBias && e <= 254 - kMaxExponent + kBias;
}

// Two elements: bytes at bits 0-7 and 16-23 of `x` (normal or zero) -> their
// bfloat16 bits times 2^(e-127), k = e - bias in [0, 254 - max exponent].
// Each half: (magnitude << (7 - kMan)) puts the FP8 exponent at bit 7, k << 7
// (only for nonzero magnitudes: bit 7 of mag + 0x7F times k) rebiases it,
// and the sign moves from bit 7 to bit 15. Halves stay below 0x8000.
template <int kMan>
EQX_QUANT_HOST_DEVICE inline uint32_t FastPair(uint32_t x, uint32_t k) {
  const uint32_t mag = x & 0x007F007Fu;
  const uint32_t nonzero = (mag + 0x007F007Fu) & 0x00800080u;
  return ((mag << (7 - kMan)) + nonzero * k) | ((x << 8) & 0x80008000u);
}

// FastPair with a k per half: k_pair holds the low element's k at bits 0-7
// and the high one's at bits 16-23 (each half masked to the nonzero
// magnitudes instead of multiplied).
template <int kMan>
EQX_QUANT_HOST_DEVICE inline uint32_t FastPairScales(uint32_t x, uint32_t k_pair) {
  const uint32_t mag = x & 0x007F007Fu;
  const uint32_t nonzero = (mag + 0x007F007Fu) & 0x00800080u;
  const uint32_t mask = (nonzero >> 7) * 0xFFFFu;
  return ((mag << (7 - kMan)) + ((k_pair << 7) & mask)) | ((x << 8) & 0x80008000u);
}

// Bytes 0, 1 (hi: 2, 3) of w at bits 0-7 and 16-23.
EQX_QUANT_HOST_DEVICE inline uint32_t SpreadPair(uint32_t w, bool hi) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(w, 0, hi ? 0x4342 : 0x4140);
#else
  const uint32_t v = hi ? w >> 16 : w;
  return (v & 0xFFu) | ((v << 8) & 0x00FF0000u);
#endif
}

// The scalar arithmetic, for octets the fast path cannot take: element t's
// payload is byte t % 4 of lo (t < 4) or hi, its scale byte t % 4 of
// scales_lo or scales_hi.
template <typename Format>
EQX_QUANT_HOST_DEVICE inline OctetWords ScalarOctet(uint32_t lo, uint32_t hi,
                                                    uint32_t scales_lo, uint32_t scales_hi) {
  uint32_t words[4];
  EQX_QUANT_UNROLL
  for (int w = 0; w < 4; ++w) {
    const uint32_t src = w < 2 ? lo : hi;
    const uint32_t scales = w < 2 ? scales_lo : scales_hi;
    const int shift = 16 * (w % 2);
    const uint32_t a = ToBf16Bits(Fp8Value<Format>((src >> shift) & 0xFF) *
                                  E8m0Value((scales >> shift) & 0xFF));
    const uint32_t b = ToBf16Bits(Fp8Value<Format>((src >> (shift + 8)) & 0xFF) *
                                  E8m0Value((scales >> (shift + 8)) & 0xFF));
    words[w] = a | (b << 16);
  }
  return OctetWords{words[0], words[1], words[2], words[3]};
}

// The bfloat16 bits of 8 payload bytes (little-endian in lo, hi) times the
// E8M0 scale byte `scale`, as 4 words of 2 elements (element 0 in the low
// half of word 0): ToBf16Bits(Fp8Value(byte) * E8m0Value(scale)) each.
template <typename Format>
EQX_QUANT_HOST_DEVICE inline OctetWords DecodeOctet(uint32_t lo, uint32_t hi, uint32_t scale) {
  constexpr int kMan = Format::kMantissaBits;
  if (!ScaleFits<Format>(scale) || (SpecialBytes<Format>(lo) | SpecialBytes<Format>(hi)) != 0) {
    return ScalarOctet<Format>(lo, hi, scale * 0x01010101u, scale * 0x01010101u);
  }
  const uint32_t k = scale - Format::kExponentBias;
  return OctetWords{FastPair<kMan>(SpreadPair(lo, false), k),
                    FastPair<kMan>(SpreadPair(lo, true), k),
                    FastPair<kMan>(SpreadPair(hi, false), k),
                    FastPair<kMan>(SpreadPair(hi, true), k)};
}

// As DecodeOctet, with element t's scale in byte t % 4 of scales_lo (t < 4)
// or scales_hi: blocks across the octet (a colwise part).
template <typename Format>
EQX_QUANT_HOST_DEVICE inline OctetWords DecodeOctetScales(uint32_t lo, uint32_t hi,
                                                          uint32_t scales_lo,
                                                          uint32_t scales_hi) {
  constexpr int kMan = Format::kMantissaBits;
  bool fits = (SpecialBytes<Format>(lo) | SpecialBytes<Format>(hi)) == 0;
  EQX_QUANT_UNROLL
  for (int t = 0; t < 4; ++t) {
    fits = fits && ScaleFits<Format>((scales_lo >> (8 * t)) & 0xFF) &&
           ScaleFits<Format>((scales_hi >> (8 * t)) & 0xFF);
  }
  if (!fits) return ScalarOctet<Format>(lo, hi, scales_lo, scales_hi);
  // (e - bias) per half, each below 256: no borrow across the halves.
  const uint32_t bias = Format::kExponentBias * 0x00010001u;
  return OctetWords{
      FastPairScales<kMan>(SpreadPair(lo, false), SpreadPair(scales_lo, false) - bias),
      FastPairScales<kMan>(SpreadPair(lo, true), SpreadPair(scales_lo, true) - bias),
      FastPairScales<kMan>(SpreadPair(hi, false), SpreadPair(scales_hi, false) - bias),
      FastPairScales<kMan>(SpreadPair(hi, true), SpreadPair(scales_hi, true) - bias)};
}

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_CUDA_MX_OCTET_DECODE_CUH_
