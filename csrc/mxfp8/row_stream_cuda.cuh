// MXFP8 rowwise as a flat stream (sm_90a): RowStreamKernel, the rowwise-only
// path of eqx_quant_mxfp8_quantize when every row is a whole number of blocks
// and the buffers are aligned. Included by mxfp8/quantize_cuda.cu only
// (which launches it); same bytes as its TileKernel and the CPU kernel.
//
// The data as one flat stream of 16-byte vectors. Vector i (elements
// i * kVec ...) is lane i % 32 of a warp, so block i / kLanesPerBlock is
// kLanesPerBlock consecutive lanes and its scale byte goes to
// row_scale[i / kLanesPerBlock]. A CTA takes one chunk of kRowStreamThreads x
// kRowStreamUnroll vectors and exits (a grid of short CTAs streams faster
// than one persistent wave: benchmarks/probes/stream_cast.cu); a warp takes
// 32 x kRowStreamUnroll consecutive vectors, so that its scale bytes are one
// whole 32-byte sector (16-bit inputs; half a sector for f32), staged in
// shared memory and written by one streaming store.

#ifndef EQX_QUANT_CSRC_MXFP8_ROW_STREAM_CUDA_CUH_
#define EQX_QUANT_CSRC_MXFP8_ROW_STREAM_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/e8m0.h"
#include "common/fp8_format.h"
#include "common/mxfp8_problem.h"
#include "cuda/fp8_convert.cuh"
#include "mxfp8/device_cuda.cuh"

namespace eqx_quant::cuda::mxfp8_row {

using mxfp8::BlockScale;
using mxfp8::QuantizeVector;
using mxfp8::VectorKey;

constexpr int kBlock = static_cast<int>(kMxfp8BlockSize);  // 32
constexpr int kRowStreamThreads = 256;
constexpr int kRowStreamUnroll = 4;  // 16-byte loads in flight per thread
// A warp's scale bytes for 16-bit inputs (4 lanes per block; f32: half).
constexpr int kWarpScaleBytes = 32 * kRowStreamUnroll / 4;

struct RowStreamParams {
  const void* x;
  uint8_t* row;
  uint8_t* row_scale;
  int64_t vectors;  // elements / kVec: a multiple of kLanesPerBlock
  bool words;       // row_scale 4-byte aligned: scale bytes as words
};

// One CTA's chunk: vectors [chunk0, chunk0 + valid) of the stream, valid <=
// kRowStreamThreads * kRowStreamUnroll (kFull: all of them, no range checks).
// staged: the warp's kWarpScaleBytes of shared memory.
template <typename In, Fp8Format kFormat, bool kFull>
__device__ __forceinline__ void RowStreamChunk(const RowStreamParams& p,
                                               int64_t chunk0, int valid,
                                               uint8_t* staged) {
  constexpr int kVec = In::kVec;
  constexpr int kLanesPerBlock = kBlock / kVec;   // 4 (16-bit) or 8 (f32)
  const int lane = threadIdx.x % 32;
  // This warp's vectors: [warp0, warp0 + 32 * kRowStreamUnroll) of the chunk.
  const int warp0 = (threadIdx.x - lane) * kRowStreamUnroll;
  const int64_t mine = chunk0 + warp0 + lane;
  const uint4* x = static_cast<const uint4*>(p.x) + mine;
  uint8_t* const row = p.row + mine * kVec;
  uint8_t* const scale = p.row_scale + (chunk0 + warp0) / kLanesPerBlock;
  auto in_range = [&](int u) { return kFull || warp0 + u * 32 + lane < valid; };

  // The warp's scale bytes (32 x kRowStreamUnroll / kLanesPerBlock: 32 for
  // 16-bit inputs, 16 for f32) are contiguous; when the whole warp is in
  // range they are staged in shared memory and leave as words, in one
  // streaming store instruction at the end.
  constexpr int kWarpWords = 32 * kRowStreamUnroll / kLanesPerBlock / 4;
  static_assert(4 * kWarpWords <= kWarpScaleBytes, "staged fits the words");
  const bool warp_words =
      p.words && (kFull || warp0 + 32 * kRowStreamUnroll <= valid);

  uint4 raw[kRowStreamUnroll];
#pragma unroll
  for (int u = 0; u < kRowStreamUnroll; ++u) {
    raw[u] = in_range(u) ? LoadStreaming(x + u * 32) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int u = 0; u < kRowStreamUnroll; ++u) {
    // Every lane runs the shuffles; a block is wholly in or out of range.
    const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
    uint32_t key = VectorKey<In>(w);
#pragma unroll
    for (int s = 1; s < kLanesPerBlock; s *= 2) {
      key = max(key, __shfl_xor_sync(0xFFFFFFFFu, key, s));
    }
    const uint32_t e = BlockScale<kFormat>(In::KeyToFloat(key));
    if (in_range(u)) {
      const float factor = mxfp8::BlockFactor(e);
      uint32_t q[kVec / 4];
      QuantizeVector<In, kFormat, true>(w, &factor, q);
      StoreCastWords(row + u * 32 * kVec, q);
    }
    if (lane % kLanesPerBlock == 0) {
      const int block = (u * 32 + lane) / kLanesPerBlock;  // in the warp's
      if (warp_words) {
        staged[block] = e;
      } else if (in_range(u)) {
        scale[block] = e;
      }
    }
  }
  if (warp_words) {
    // Whole 32-byte sectors from one instruction, evicted first like the FP8
    // bytes (partial sectors would stay in L2 and leave it later, out of
    // order).
    __syncwarp();
    if (lane < kWarpWords) {
      const uint32_t q[1] = {reinterpret_cast<const uint32_t*>(staged)[lane]};
      StoreCastWords(scale + 4 * lane, q);
    }
  }
}

template <typename In, Fp8Format kFormat>
__global__ void __launch_bounds__(kRowStreamThreads, 8)
    RowStreamKernel(const __grid_constant__ RowStreamParams p) {
  constexpr int kChunk = kRowStreamThreads * kRowStreamUnroll;
  __shared__ __align__(16)
      uint8_t staged[kRowStreamThreads / 32][kWarpScaleBytes];
  const int64_t chunk0 = int64_t{blockIdx.x} * kChunk;
  const int64_t left = p.vectors - chunk0;
  if (left >= kChunk) {
    RowStreamChunk<In, kFormat, true>(p, chunk0, kChunk,
                                      staged[threadIdx.x / 32]);
  } else {
    RowStreamChunk<In, kFormat, false>(p, chunk0, static_cast<int>(left),
                                       staged[threadIdx.x / 32]);
  }
}

}  // namespace eqx_quant::cuda::mxfp8_row

#endif  // EQX_QUANT_CSRC_MXFP8_ROW_STREAM_CUDA_CUH_
