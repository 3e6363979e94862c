// The NVFP4 encode of 16-bit (bf16 / f16) values kept packed, two per word
// (value 2k in the low half of word k), with stochastic rounding: the
// counterparts of HalfRowCodes and HalfBlockCodes
// (nvfp4/half_codes_cuda.cuh) for callers that draw the random bytes
// themselves. The block key as a max over the halves' magnitude bits, the
// code word by E2M1StochasticWord8 (signs straight from the words), and for a
// block with a NaN the NaN-ignoring key and the NaN-aware encoder
// (EncodeSrBytes). Used by the grouped GroupedPanelKernel
// (grouped/nvfp4_panel_cuda.cu); the same bytes as the CPU kernel.

#ifndef EQX_QUANT_CSRC_NVFP4_HALF_SR_CODES_CUDA_CUH_
#define EQX_QUANT_CSRC_NVFP4_HALF_SR_CODES_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "nvfp4/device_cuda.cuh"
#include "nvfp4/half_codes_cuda.cuh"
#include "nvfp4/math_cuda.cuh"

namespace eqx_quant::cuda::nvfp4 {

// HalfRowCodes with stochastic rounding: the code word and scale byte of a
// lane's 8 values w of a rowwise block (the block is this lane and lane ^ 1,
// both calling it: block_lanes is their mask), element e rounded with byte
// e % 4 of rbytes[e / 4].
template <typename In>
__device__ __forceinline__ uint32_t HalfRowSrCodes(
    const uint32_t (&w)[4], float factor, const float* enc_table,
    unsigned block_lanes, const uint32_t (&rbytes)[2], uint32_t& sdb) {
  float v[8];
  bool has_nan;
  const uint32_t key = HalfRowKey<In>(w, block_lanes, v, has_nan);
  Unpack<In, 8>(w, v);  // (the same values again where HalfRowKey wrote them)
  sdb = E4M3Byte(MulRn(__uint_as_float(key), factor));
  const float enc = enc_table[sdb & 127u];
  if (has_nan) {
    uint32_t q[2];
    EncodeSrBytes<8>(v, enc, rbytes, true, q);
    return PackNibbles8(q[0], q[1]);
  }
  return EncodeSrWord8(v, enc, rbytes, w);
}

// HalfBlockCodes with stochastic rounding: the scale byte and the packed
// codes of a block of 16 values of type Elem in 8 words w, element e rounded
// with byte e % 4 of rbytes[e / 4].
template <typename Elem>
__device__ __forceinline__ uint2 HalfBlockSrCodes(const uint32_t (&w)[kB / 2],
                                                  float factor,
                                                  const float* enc_table,
                                                  const uint32_t (&rbytes)[4],
                                                  uint32_t& sdb) {
  uint32_t key = __float_as_uint(HalfKey16<Elem>(w));
  const bool has_nan = key > kF32Inf;
  float v[kB];
  Unpack<Elem, kB>(w, v);
  if (has_nan) key = NanFreeKey<kB>(v);
  sdb = E4M3Byte(MulRn(__uint_as_float(key), factor));
  const float enc = enc_table[sdb & 127u];
  if (has_nan) {
    uint32_t q[4];
    EncodeSrBytes<kB>(v, enc, rbytes, true, q);
    return make_uint2(PackNibbles8(q[0], q[1]), PackNibbles8(q[2], q[3]));
  }
  const uint32_t lo[4] = {w[0], w[1], w[2], w[3]};
  const uint32_t hi[4] = {w[4], w[5], w[6], w[7]};
  const float v_lo[8] = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
  const float v_hi[8] = {v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15]};
  const uint32_t r_lo[2] = {rbytes[0], rbytes[1]};
  const uint32_t r_hi[2] = {rbytes[2], rbytes[3]};
  return make_uint2(EncodeSrWord8(v_lo, enc, r_lo, lo),
                    EncodeSrWord8(v_hi, enc, r_hi, hi));
}

}  // namespace eqx_quant::cuda::nvfp4

#endif  // EQX_QUANT_CSRC_NVFP4_HALF_SR_CODES_CUDA_CUH_
