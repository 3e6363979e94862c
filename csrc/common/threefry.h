// Threefry-2x32 with 20 rounds (Random123; the generator behind jax.random's
// default keys) and the counter-based random byte of one quantized element,
// as specified in docs/block_formats.md ("Stochastic rounding"): one call
// serves the eight elements of an octet of indices.
//
// Pure 32-bit integer arithmetic: the same header gives the same words on the
// host and on a CUDA device.

#ifndef EQX_QUANT_CSRC_COMMON_THREEFRY_H_
#define EQX_QUANT_CSRC_COMMON_THREEFRY_H_

#include <cstdint>

#include "common/host_device.h"

namespace eqx_quant {

// The key schedule's parity constant.
inline constexpr uint32_t kThreefryParity = 0x1BD11BDAu;

EQX_QUANT_HOST_DEVICE inline uint32_t RotateLeft32(uint32_t value, int amount) {
  return (value << amount) | (value >> (32 - amount));
}

// Four rounds of one group: x0 += x1; x1 = rotl(x1, r) ^ x0.
EQX_QUANT_HOST_DEVICE inline void ThreefryGroup(uint32_t& x0, uint32_t& x1,
                                                int r0, int r1, int r2,
                                                int r3) {
  x0 += x1;
  x1 = RotateLeft32(x1, r0) ^ x0;
  x0 += x1;
  x1 = RotateLeft32(x1, r1) ^ x0;
  x0 += x1;
  x1 = RotateLeft32(x1, r2) ^ x0;
  x0 += x1;
  x1 = RotateLeft32(x1, r3) ^ x0;
}

// 1, which on a CUDA device ptxas cannot prove to be 1 (the lane id >> 5,
// plus 1): arithmetic by it stays a multiply (IMAD, FMUL) on the FMA pipe
// instead of becoming an add, mask or shift on the ALU pipe, which the SR
// kernels fill (Threefry's rotations and xors; the ALU pipe is half of an SM
// sub-partition's integer throughput). Here: the key injections
// x = x * one + k, which as plain adds ptxas would fuse into the next round's
// add as 3-input IADD3s (more ALU instructions per call); also
// E2M1StochasticSum (nvfp4/stochastic_math_cuda.cuh). The same bits.
EQX_QUANT_HOST_DEVICE inline uint32_t OpaqueOne() {
#if defined(__CUDA_ARCH__)
  uint32_t lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  return (lane >> 5) + 1u;
#else
  return 1u;
#endif
}

// Threefry-2x32-20 of the counter (c0, c1) under the key (k0, k1); writes
// both output words. Five groups of four rounds, rotations (13, 15, 26, 6)
// for the even groups and (17, 29, 16, 24) for the odd ones, each group
// followed by the key injection x0 += ks[(g+1)%3], x1 += ks[(g+2)%3] + g + 1.
EQX_QUANT_HOST_DEVICE inline void Threefry2x32(uint32_t k0, uint32_t k1,
                                               uint32_t c0, uint32_t c1,
                                               uint32_t& out0, uint32_t& out1) {
  const uint32_t k2 = k0 ^ k1 ^ kThreefryParity;
  const uint32_t one = OpaqueOne();
  uint32_t x0 = c0 + k0;
  uint32_t x1 = c1 + k1;
  ThreefryGroup(x0, x1, 13, 15, 26, 6);  // group 0
  x0 = x0 * one + k1;
  x1 = x1 * one + (k2 + 1u);
  ThreefryGroup(x0, x1, 17, 29, 16, 24);  // group 1
  x0 = x0 * one + k2;
  x1 = x1 * one + (k0 + 2u);
  ThreefryGroup(x0, x1, 13, 15, 26, 6);  // group 2
  x0 = x0 * one + k0;
  x1 = x1 * one + (k1 + 3u);
  ThreefryGroup(x0, x1, 17, 29, 16, 24);  // group 3
  x0 = x0 * one + k1;
  x1 = x1 * one + (k2 + 4u);
  ThreefryGroup(x0, x1, 13, 15, 26, 6);  // group 4
  x0 = x0 * one + k2;
  x1 = x1 * one + (k0 + 5u);
  out0 = x0;
  out1 = x1;
}

// Stream ids of the two quantized parts (they draw independent bytes for
// the same index).
inline constexpr uint32_t kRowwiseStream = 0;
inline constexpr uint32_t kColwiseStream = 1;

// The high counter word of the octet `octet` in `stream`: hi32(octet) |
// stream << 31 (the low word is lo32(octet)).
EQX_QUANT_HOST_DEVICE inline uint32_t StochasticRoundingCounterHigh(
    uint64_t octet, uint32_t stream) {
  return static_cast<uint32_t>(octet >> 32) | ((stream & 1u) << 31);
}

// The two words of the octet `octet`, shared by the elements of indices
// 8 octet .. 8 octet + 7: threefry2x32(key, (lo32(octet), hi32(octet) |
// stream << 31)). Word 0 holds the random bytes of the first four (index
// 8 octet in its low byte), word 1 those of the last four.
EQX_QUANT_HOST_DEVICE inline void StochasticRoundingOctet(uint32_t k0,
                                                          uint32_t k1,
                                                          uint64_t octet,
                                                          uint32_t stream,
                                                          uint32_t& word0,
                                                          uint32_t& word1) {
  Threefry2x32(k0, k1, static_cast<uint32_t>(octet),
               StochasticRoundingCounterHigh(octet, stream), word0, word1);
}

// The random byte (0..255) of the index `index` among its octet's words.
EQX_QUANT_HOST_DEVICE inline uint32_t OctetByte(uint32_t word0, uint32_t word1,
                                                uint64_t index) {
  const uint32_t word = (index & 4u) ? word1 : word0;
  return (word >> (8u * static_cast<uint32_t>(index & 3u))) & 0xFFu;
}

// The random byte of the element of index `index` (one Threefry call; where
// a loop holds a whole octet, StochasticRoundingOctet serves it with one).
EQX_QUANT_HOST_DEVICE inline uint32_t StochasticRoundingByte(uint32_t k0,
                                                             uint32_t k1,
                                                             uint64_t index,
                                                             uint32_t stream) {
  uint32_t word0;
  uint32_t word1;
  StochasticRoundingOctet(k0, k1, index >> 3, stream, word0, word1);
  return OctetByte(word0, word1, index);
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_THREEFRY_H_
