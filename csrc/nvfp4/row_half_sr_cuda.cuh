// NVFP4 rowwise with stochastic rounding for 16-bit inputs (sm_90a):
// RowHalfSrKernel, the path of eqx_quant_nvfp4_quantize for bf16 / f16 with
// stochastic rounding when every row is a whole number of 16-element blocks
// and the buffers are aligned. Included by nvfp4/quantize_cuda.cu only
// (which calls LaunchRowHalfSr); the same bytes as RowFastKernel<SR> and the
// CPU kernel.
//
// RowFastKernel<SR> is ALU-bound, and of its instructions per 16-byte vector
// the encode and one Threefry call are about 60%; the rest is its index
// cursor (a division per step, a 64-bit carry per vector, the run's octet
// shifts), the unpacked block key and the 64-bit loop control. Here
// RowHalfKernel's loop runs the steps (the cp.async ring, 32-bit step counts,
// only the last step checks ranges), the block key is its max over packed
// 16-bit halves, and where the SR index is
// the local linear index plus a multiple of 8 (`linear` below: x is the
// shard of a tensor whose dims after the first are x's, the usual layouts),
// vector j of an example is exactly octet base / 8 + j of its indices: one
// Threefry call on that counter gives its 8 random bytes in order. Other
// offsets (a last-dim offset, a 32-bit wrap of s + offset) take the general
// index per vector (a division and EncodeSrRun), the same bytes.

#ifndef EQX_QUANT_CSRC_NVFP4_ROW_HALF_SR_CUDA_CUH_
#define EQX_QUANT_CSRC_NVFP4_ROW_HALF_SR_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/nvfp4_format.h"
#include "common/threefry.h"
#include "nvfp4/device_cuda.cuh"
#include "nvfp4/row_half_cuda.cuh"
#include "nvfp4/stochastic_math_cuda.cuh"

namespace eqx_quant::cuda::nvfp4 {

// 80 registers (Threefry's state beside the ring's addresses), 3 CTAs.
constexpr int kRowHalfSrBlocksPerSm = 3;
// Steps per CTA: the kernel is instruction-bound, so short CTAs balance the
// SMs' work (a persistent wave of ~21 steps per CTA leaves SMs idle at the
// end); 4 steps amortize the CTA prologue (RowFastKernel<SR>'s measure).
constexpr int kRowHalfSrSteps = 4;

struct RowHalfSrParams {
  RowHalfParams half;
  const uint32_t* key;  // batch x 2 threefry key words
  SrLayout sr;          // the SR index: rows over S[:n-1], L = S[n-1]
  // L = sr.shape[n - 1], a copy: reading sr.shape there instead makes the
  // kernel's code slower.
  int64_t l;
  // The global shape's dims after the first are x's (S[1:] == G[1:]): the
  // rowwise SR index is the local linear index plus sum(offset * stride)
  // wherever no s + offset wraps in 32 bits.
  bool contiguous;
};

// Where a CTA's SR indices come from: `linear` (the index of local element
// e is 8 * base_octet + e) or the general layout.
struct RowSrIndex {
  bool linear;
  uint64_t base_octet;
  uint32_t last_offset;  // uint32 of the last dim's offset (general)
};

// The CTA's RowSrIndex, from the offsets (device memory, read once).
__device__ __forceinline__ RowSrIndex MakeRowSrIndex(const RowHalfSrParams& p) {
  const SrLayout& s = p.sr;
  bool linear = p.contiguous;
  uint64_t base = 0;
  uint32_t offset = 0;  // after the loop: the last dim's
  for (int d = 0; d < s.n; ++d) {
    offset = static_cast<uint32_t>(__ldg(s.offset + d));
    // uint32(s_d) + uint32(offset_d) wraps for no s_d < S_d.
    linear &= uint64_t{offset} + static_cast<uint64_t>(s.shape[d]) - 1 <=
              0xFFFFFFFFu;
    base += uint64_t{offset} * s.stride[d];
  }
  // base + e does not wrap past 2^64 for any e of an example (the index is
  // mod 2^64, the octet counter of the linear path is not).
  const uint64_t elements = static_cast<uint64_t>(p.half.vectors) * 8;
  linear &= (base & 7u) == 0 && base <= ~uint64_t{0} - (elements - 1);
  return RowSrIndex{linear, base >> 3, offset};
}

// One step of a lane with stochastic rounding (RowHalfStep's structure):
// vectors u * kRowHalfThreads from `vector` (the lane's first, an index in
// the example). A step with a NaN anywhere in the warp takes the NaN-ignoring
// key for the blocks that hold one.
template <typename In, bool kWhole>
__device__ __forceinline__ void RowHalfSrStep(
    const uint4 (&raw)[kRowHalfUnroll], const float* enc_table, float factor,
    const RowHalfSrParams& p, const RowSrIndex& index, uint32_t key0,
    uint32_t key1, int64_t vector, uint32_t* out, uint8_t* scale, bool even,
    int valid) {
  uint32_t key[kRowHalfUnroll];  // bits of the blocks' max |x| (NaN: a NaN)
  bool has_nan[kRowHalfUnroll];
  const bool warp_nan =
      __any_sync(0xFFFFFFFFu, HalfPairKeys<In>(raw, key, has_nan));
  if (index.linear && !warp_nan) {
    // The usual case. The 4 Threefry calls first, in one basic block: 4
    // independent dependency chains of ~60 instructions that the scheduler
    // interleaves.
    uint32_t rbytes[kRowHalfUnroll][2];
#pragma unroll
    for (int u = 0; u < kRowHalfUnroll; ++u) {
      StochasticRoundingOctet(key0, key1,
                              index.base_octet + (vector + u * kRowHalfThreads),
                              kRowwiseStream, rbytes[u][0], rbytes[u][1]);
    }
#pragma unroll
    for (int u = 0; u < kRowHalfUnroll; ++u) {
      const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
      const uint32_t sdb = E4M3Byte(MulRn(__uint_as_float(key[u]), factor));
      float v[8];
      Unpack<In, 8>(w, v);
      StoreHalfVector<kWhole>(out, scale, even, u, valid,
                              EncodeSrWord8(v, enc_table[sdb & 127u],
                                            rbytes[u], w),
                              sdb);
    }
    return;
  }
  // A NaN in the warp, or the general index: vector by vector.
#pragma unroll
  for (int u = 0; u < kRowHalfUnroll; ++u) {
    const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
    float v[8];
    Unpack<In, 8>(w, v);
    if (warp_nan) {  // drop the NaNs from the keys that hold one
      uint32_t clean = NanFreeKey<8>(v);
      clean = max(clean, __shfl_xor_sync(0xFFFFFFFFu, clean, 1));
      key[u] = has_nan[u] ? clean : key[u];
    }
    const uint32_t sdb = E4M3Byte(MulRn(__uint_as_float(key[u]), factor));
    const float enc = enc_table[sdb & 127u];
    const int64_t j = vector + u * kRowHalfThreads;
    uint32_t q[2];
    if (index.linear) {
      uint32_t rbytes[2];
      StochasticRoundingOctet(key0, key1, index.base_octet + j, kRowwiseStream,
                              rbytes[0], rbytes[1]);
      EncodeSrBytes<8>(v, enc, rbytes, has_nan[u], q);
    } else {
      int64_t col;
      const int64_t row = DivMod(j * 8, p.l, p.sr.narrow, col);
      EncodeSrRun<8>(v, enc, key0, key1, kRowwiseStream,
                     SrMulti(p.sr, 0, p.sr.n - 1, row),
                     static_cast<uint32_t>(col) + index.last_offset, has_nan[u],
                     q);
    }
    StoreHalfVector<kWhole>(out, scale, even, u, valid,
                            PackNibbles8(q[0], q[1]), sdb);
  }
}

// Grid (x: CTAs of kRowHalfSrSteps steps each, CTA b taking steps b, b +
// grid, ...; y: examples); launched with programmatic dependent launch after
// the amax kernel.
template <typename In>
__global__ void __launch_bounds__(kRowHalfThreads, kRowHalfSrBlocksPerSm)
    RowHalfSrKernel(const __grid_constant__ RowHalfSrParams p) {
  static_assert(In::kVec == 8, "16-bit inputs");
  extern __shared__ uint4 ring[];
  __shared__ float enc_table[128];
  WaitForPrerequisiteGrids();  // the amax kernel (programmatic launch)
  const RowSrIndex index = MakeRowSrIndex(p);
  for (int64_t ex = blockIdx.y; ex < p.half.batch; ex += gridDim.y) {
    const RowHalfLane lane = RowHalfLaneOf(p.half, ex);
    const Nvfp4TensorScale ts = MakeNvfp4TensorScale(p.half.amax[ex]);
    FillEncodeTable(enc_table, ts);
    const uint32_t key0 = p.key[2 * ex];
    const uint32_t key1 = p.key[2 * ex + 1];
    const float factor = ts.factor;
    RowHalfExample(p.half, ring, lane.x, lane.out, lane.scale,
                   [&](auto whole, const uint4 (&raw)[kRowHalfUnroll],
                       uint32_t* o, uint8_t* s, bool even, int valid,
                       int64_t vector) {
                     RowHalfSrStep<In, decltype(whole)::value>(
                         raw, enc_table, factor, p, index, key0, key1, vector,
                         o, s, even, valid);
                   });
  }
}

// Launches RowHalfSrKernel over `batch` examples of `elements` (a multiple
// of 16) values each (rows of L = sr.shape[n - 1]); CTAs of kRowHalfSrSteps steps (fewer where
// that would leave resident slots empty), grid_y of them per example.
template <typename In>
Nvfp4LaunchStatus LaunchRowHalfSr(const Nvfp4QuantizeBuffers& buf,
                                  int64_t batch, int64_t elements,
                                  const SrLayout& sr, bool contiguous,
                                  unsigned grid_y, cudaStream_t stream) {
  RowHalfSrParams p{};
  const Nvfp4LaunchStatus made =
      MakeRowHalfParams(buf, batch, elements, p.half);
  if (!made.ok) return made;
  p.key = buf.key;
  p.sr = sr;
  p.l = sr.shape[sr.n - 1];
  p.contiguous = contiguous;
  static const int per_sm = ResidentBlocks(
      RowHalfSrKernel<In>, kRowHalfThreads, kRowHalfSrBlocksPerSm,
      kRowHalfRingBytes);
  return LaunchRowHalfGrid(
      RowHalfSrKernel<In>, p,
      RowHalfGridX(p.half.steps, per_sm, kRowHalfSrSteps, grid_y), grid_y,
      "allowing RowHalfSrKernel its shared memory",
      "launching RowHalfSrKernel", stream);
}

}  // namespace eqx_quant::cuda::nvfp4

#endif  // EQX_QUANT_CSRC_NVFP4_ROW_HALF_SR_CUDA_CUH_
