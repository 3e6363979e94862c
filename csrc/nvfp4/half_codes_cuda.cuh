// The NVFP4 encode of 16-bit (bf16 / f16) values kept packed, two per word
// (value 2k in the low half of word k), without stochastic rounding: the
// block key as a max over the halves' magnitude bits (both formats order
// magnitudes as their bits do, NaN above inf), the code word's magnitudes in
// pairs on the FMA pipe and its signs straight from the words
// (nvfp4/math_cuda.cuh), and the unpacked exact path for a
// block with a NaN. Used by RowHalfKernel (nvfp4/row_half_cuda.cuh)
// and PanelKernel (nvfp4/panel_cuda.cu); the same bytes as the CPU
// kernel.

#ifndef EQX_QUANT_CSRC_NVFP4_HALF_CODES_CUDA_CUH_
#define EQX_QUANT_CSRC_NVFP4_HALF_CODES_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "nvfp4/device_cuda.cuh"
#include "nvfp4/math_cuda.cuh"

namespace eqx_quant::cuda::nvfp4 {

// The scale byte with the smallest encode multiplier (448, E4M3's largest
// finite value): a multiplier / 8 is exact for every scale byte of a tensor
// scale iff it is for this byte's (false only for a global amax above 6 x
// 2^123).
constexpr uint32_t kSmallestMultiplierByte = 0x7E;

// The block key (max |v| as an f32; a NaN if the block has one) of a rowwise
// block of 16 16-bit values of type In held by this lane (w: 8 of them) and
// lane ^ 1, which must call it too.
template <typename In>
__device__ __forceinline__ float HalfPairKey(const uint32_t (&w)[4]) {
  uint32_t m = HalfMagnitudeMax(w);
  m = MaxU16x2(m, __shfl_xor_sync(0xFFFFFFFFu, m, 1));
  return In::Convert(static_cast<typename In::Storage>(FoldHalves(m)));
}

// The block keys (bits of max |v|; a NaN if the block has one) of kCount
// vectors of 8 16-bit values of type In (HalfPairKey: lane ^ 1 must call it
// too), whether each block has a NaN, and whether any of this lane's does.
template <typename In, int kCount>
__device__ __forceinline__ bool HalfPairKeys(const uint4 (&raw)[kCount],
                                             uint32_t (&key)[kCount],
                                             bool (&has_nan)[kCount]) {
  bool any_nan = false;
#pragma unroll
  for (int u = 0; u < kCount; ++u) {
    const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
    key[u] = __float_as_uint(HalfPairKey<In>(w));
    has_nan[u] = key[u] > kF32Inf;
    any_nan |= has_nan[u];
  }
  return any_nan;
}

// The block key of a lane's 8 16-bit values w of a rowwise block (the block
// is this lane and lane ^ 1, both calling it; block_lanes their mask), as
// bits, and whether the block has a NaN: then the key ignores the NaNs, and
// v holds the lane's unpacked values (else v is not written).
template <typename In>
__device__ __forceinline__ uint32_t HalfRowKey(const uint32_t (&w)[4],
                                               unsigned block_lanes,
                                               float (&v)[8], bool& has_nan) {
  uint32_t key = __float_as_uint(HalfPairKey<In>(w));
  has_nan = key > kF32Inf;  // both lanes of the block agree
  if (has_nan) {
    Unpack<In, 8>(w, v);
    key = NanFreeKey<8>(v);
    key = max(key, __shfl_xor_sync(block_lanes, key, 1));
  }
  return key;
}

// The code word of the 8 NaN-free 16-bit values of w (of type Elem) times the
// encode multiplier: nibble e = FloatToE2M1(fl(v_e * enc)). kScaled: `enc`
// is the multiplier / 8 (exact) and the magnitudes come in pairs
// (CodeWord8Scaled); else `enc` is the multiplier (CodeWord8).
template <typename Elem, bool kScaled>
__device__ __forceinline__ uint32_t HalfCodeWord8(const uint32_t (&w)[4],
                                                  float enc) {
  float a[8];
  if constexpr (kScaled) {
#pragma unroll
    for (int e = 0; e < 8; ++e) a[e] = MulSatRn(fabsf(Elem::Element(w, e)), enc);
    return CodeWord8Scaled(a, w);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) a[e] = MulRn(fabsf(Elem::Element(w, e)), enc);
    return CodeWord8(a, w);
  }
}

// The block key (max |v| as an f32; a NaN if the block has one) of 16
// 16-bit values of type Elem packed in 8 words.
template <typename Elem>
__device__ __forceinline__ float HalfKey16(const uint32_t (&w)[8]) {
  const uint32_t lo[4] = {w[0], w[1], w[2], w[3]};
  const uint32_t hi[4] = {w[4], w[5], w[6], w[7]};
  const uint32_t m =
      FoldHalves(MaxU16x2(HalfMagnitudeMax(lo), HalfMagnitudeMax(hi)));
  return Elem::Convert(static_cast<uint16_t>(m));
}

// The 16 values of a column of the panel (element sub of each row's word)
// as 16-bit pairs: value 2k in the low half of word k (16-bit inputs).
__device__ __forceinline__ void ColumnPairs(const uint32_t (&words)[kB],
                                            int sub,
                                            uint32_t (&packed)[kB / 2]) {
#pragma unroll
  for (int k = 0; k < kB / 2; ++k) {
    packed[k] = __byte_perm(words[2 * k], words[2 * k + 1],
                            sub == 0 ? 0x5410u : 0x7632u);
  }
}

// The scale byte and the packed codes of a block of 16 16-bit values of type
// Elem in 8 words, w (2k in the low half of word k), without stochastic
// rounding: the key from the halves' magnitude bits, the codes by
// HalfCodeWord8 (kScaled: the table holds the multipliers / 8). A block with
// a NaN takes the unpacked path (NaN-ignoring key, the exact encoder).
template <typename Elem, bool kScaled>
__device__ __forceinline__ uint2 HalfBlockCodes(const uint32_t (&w)[kB / 2],
                                                float factor,
                                                const float* enc_table,
                                                uint32_t& sdb) {
  uint32_t key = __float_as_uint(HalfKey16<Elem>(w));
  const bool has_nan = key > kF32Inf;
  float v[kB];
  if (has_nan) {
    Unpack<Elem, kB>(w, v);
    key = NanFreeKey<kB>(v);
  }
  sdb = E4M3Byte(MulRn(__uint_as_float(key), factor));
  const float enc = enc_table[sdb & 127u];
  if (has_nan) {
    uint32_t q[4];
    EncodeExact<kB>(v, kScaled ? MulRn(enc, 8.0f) : enc, q);
    return make_uint2(PackNibbles8(q[0], q[1]), PackNibbles8(q[2], q[3]));
  }
  const uint32_t lo[4] = {w[0], w[1], w[2], w[3]};
  const uint32_t hi[4] = {w[4], w[5], w[6], w[7]};
  return make_uint2(HalfCodeWord8<Elem, kScaled>(lo, enc),
                    HalfCodeWord8<Elem, kScaled>(hi, enc));
}

// The code word and scale byte of a lane's 8 16-bit values w of a rowwise
// block (the block is this lane and lane ^ 1), without stochastic rounding:
// RowHalfKernel's packed key and code word; a block with a NaN takes the
// unpacked path (NaN-ignoring key over both lanes, the exact encoder).
template <typename In, bool kScaled>
__device__ __forceinline__ uint32_t HalfRowCodes(const uint32_t (&w)[4],
                                                 float factor,
                                                 const float* enc_table,
                                                 unsigned block_lanes,
                                                 uint32_t& sdb) {
  float v[8];
  bool has_nan;
  const uint32_t key = HalfRowKey<In>(w, block_lanes, v, has_nan);
  sdb = E4M3Byte(MulRn(__uint_as_float(key), factor));
  const float enc = enc_table[sdb & 127u];
  if (has_nan) {
    uint32_t q[2];
    EncodeExact<8>(v, kScaled ? MulRn(enc, 8.0f) : enc, q);
    return PackNibbles8(q[0], q[1]);
  }
  return HalfCodeWord8<In, kScaled>(w, enc);
}

}  // namespace eqx_quant::cuda::nvfp4

#endif  // EQX_QUANT_CSRC_NVFP4_HALF_CODES_CUDA_CUH_
