// CUDA kernels of eqx_quant_nvfp4_quantize for sm_90a (H100 / H200): the
// rowwise-only kernels and the dispatch (nvfp4/panel_cuda.cu and
// nvfp4/tile_cuda.cu have the kernels of the problems with a colwise
// part or 2D scaling).
//
// Semantics: exactly the CPU kernel's (nvfp4/quantize_cpu.h), bit for
// bit (docs/block_formats.md, "NVFP4"). Per block of 16 (a partial block as
// if zero-padded): block amax = NaN-ignoring max |x| (the 16x16 tile's in
// 2D); sdb = e4m3(fl(amax * factor)); enc = Nvfp4EncodeMultiplier(sdb);
// code = e2m1(fl(x * enc)) (RN, or SR with the element's counter-based
// threefry word). The per-tensor and per-block scale math is that of
// common/nvfp4_format.h (shared with the CPU kernel); the element encoder and
// the RHT are the exact reformulations of nvfp4/math_cuda.cuh.
// Compiled with --fmad=false --ftz=false --prec-div=true, so `*` and
// `/` in the shared headers are IEEE operations, as on the host.
//
// Codes are stored packed, as XLA holds F4E2M1FN: flat element e of the
// output in nibble e % 2 (0 = low) of byte e / 2.
//
// Kernels (256 threads, nothing allocated; launched with programmatic
// dependent launch after the amax kernel, whose completion they wait for
// before reading the amax):
//   * RowFastKernel (f32; the 16-bit inputs take RowHalfKernel /
//     RowHalfSrKernel): rowwise only (no colwise part, no 2D), L % 16 == 0,
//     16-byte aligned buffers and 8-byte aligned examples in the packed
//     output. Each example is a flat run of 16-element blocks; a thread owns
//     one 16-byte vector (4 values), so a block is 4 adjacent lanes and its
//     amax a shuffle. 4 vectors per thread (lane-contiguous 16-byte loads),
//     loaded one step ahead so that they are in flight during the previous
//     step's math; the packed codes of a vector (2 bytes) are exchanged in
//     groups of 4 lanes (3 shuffles) so that each lane stores 4 consecutive
//     vectors, 8 contiguous bytes (a warp store covers 256 contiguous bytes;
//     streaming). The encode multipliers of the 128 possible scale bytes are
//     a shared table. Walks x forwards (the amax kernels walk it backwards:
//     each pass starts on what the previous one left in L2). With
//     stochastic rounding: CTAs of 4 steps of 1024 vectors instead of a
//     persistent wave; the SR index of a lane's vectors by a row / column
//     cursor, one division per step.
//   * RowHalfKernel (nvfp4/row_half_cuda.cuh): RowFastKernel's
//     problems for bf16 / f16 without stochastic rounding (4-byte aligned
//     output suffices), with the values kept packed: ~40% fewer instructions
//     per vector, loads 2 steps ahead through a cp.async ring, 4 CTAs per
//     SM.
//   * RowHalfSrKernel (nvfp4/row_half_sr_cuda.cuh): the same
//     problems with stochastic rounding: RowHalfKernel's loop and block key,
//     one Threefry call per vector on the counter base / 8 + vector where the
//     SR index is linear in the local one.
//   * RowScalarKernel: rowwise only, every other shape: one thread per block,
//     scalar loads, 8-byte stores of the packed codes where aligned, nibble
//     stores (atomic) for a byte shared with a neighbouring block (odd L).
// No kernel spills (ptxas -warn-spills is on in CMake).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/nvfp4_format.h"
#include "common/nvfp4_problem.h"
#include "common/rht.h"
#include "common/threefry.h"
#include "nvfp4/device_cuda.cuh"
#include "nvfp4/quantize_cuda.h"
#include "nvfp4/row_half_cuda.cuh"
#include "nvfp4/row_half_sr_cuda.cuh"

namespace eqx_quant::cuda {
namespace {

using namespace nvfp4;  // NOLINT: the device helpers of this op

constexpr int kThreads = 256;
constexpr int kRowUnroll = 4;  // RowFastKernel: vectors in flight per thread
constexpr int64_t kSrSteps = 4;  // RowFastKernel<SR>: steps per CTA
// RowFastKernel's resident CTAs per SM (registers <= 64, <= 80 with SR).
template <bool kSr>
constexpr int kRowFastMinBlocks = kSr ? 3 : 4;

// ---------------------------------------------------------------------------
// Rowwise kernels.

struct RowParams {
  const void* x;
  const float* amax;
  const uint32_t* key;
  uint8_t* row;
  uint8_t* row_scale;
  int64_t batch;
  int64_t elements;  // per example: rows * L
  int64_t l;
  int64_t l_blocks;  // ceil(L / 16)
  int64_t blocks;    // per example: rows * l_blocks
  bool narrow;       // elements < 2^32: 32-bit divisions
  SrLayout sr;       // the SR index: rows over S[:n-1], L = S[n-1]
  // RowFastKernel with SR: kThreads vectors (the distance between a lane's
  // vectors u and u + 1) are lane_rows rows and lane_cols (< L) elements.
  int64_t lane_rows;
  int64_t lane_cols;
};

// Where a lane's vector lies in its example (RowFastKernel with SR): row and
// column (< L) of its first element.
struct SrRowCursor {
  int64_t row;
  int64_t col;
  // The cursor kThreads vectors on (col + lane_cols < 2 L: one carry).
  __device__ __forceinline__ void Advance(const RowParams& p) {
    row += p.lane_rows;
    col += p.lane_cols;
    if (col >= p.l) {
      col -= p.l;
      ++row;
    }
  }
};


// v'[k] = v[(k - r) & 3]: a rotation by the lane's r (0..3) with selects, so
// that the array stays in registers.
__device__ __forceinline__ void RotateBy(uint32_t (&v)[4], int r) {
  const uint32_t a0 = r & 1 ? v[3] : v[0];
  const uint32_t a1 = r & 1 ? v[0] : v[1];
  const uint32_t a2 = r & 1 ? v[1] : v[2];
  const uint32_t a3 = r & 1 ? v[2] : v[3];
  v[0] = r & 2 ? a2 : a0;
  v[1] = r & 2 ? a3 : a1;
  v[2] = r & 2 ? a0 : a2;
  v[3] = r & 2 ? a1 : a3;
}

// The packed codes of a lane's kRowUnroll (4) vectors, piece[u] (2 bytes,
// low bits) for vector base + threadIdx.x + u * kThreads, exchanged in
// groups of 4 lanes: lane r of a group gets the 4 consecutive vectors of the
// group's step u = r, out[s] = lane s's piece[r] (a 4 x 4 transpose: 3
// shuffles, lane r sends piece[(r - i) & 3] to lane (r - i) & 3 at step i).
__device__ __forceinline__ void GatherPieces(const uint32_t (&piece)[4],
                                             uint32_t (&out)[4]) {
  const int lane = threadIdx.x % 32;
  const int r = lane & 3;
  uint32_t send[4] = {piece[0], piece[3], piece[2], piece[1]};  // piece[-k]
  RotateBy(send, r);  // send[i] = piece[(r - i) & 3]
  out[0] = send[0];
#pragma unroll
  for (int i = 1; i < 4; ++i) {  // out[i] = lane (r + i) & 3's piece[r]
    out[i] = __shfl_sync(0xFFFFFFFFu, send[i], (lane & ~3) | ((r + i) & 3));
  }
  RotateBy(out, r);  // out[s] = lane s's piece[r]
}

// The kRowUnroll vectors of a lane at step `base` (zeros past the end),
// streaming: x is not read again by this kernel.
__device__ __forceinline__ void LoadRowVectors(const uint4* x, int64_t base,
                                               int64_t vectors,
                                               uint4 (&raw)[kRowUnroll]) {
#pragma unroll
  for (int u = 0; u < kRowUnroll; ++u) {
    const int64_t j = base + threadIdx.x + u * kThreads;
    raw[u] = j < vectors ? __ldcs(x + j) : make_uint4(0, 0, 0, 0);
  }
}

template <typename In, bool kSr>
__global__ void __launch_bounds__(kThreads, kRowFastMinBlocks<kSr>)
    RowFastKernel(const __grid_constant__ RowParams p) {
  using Storage = typename In::Storage;
  constexpr int kVec = In::kVec;        // elements per thread vector
  constexpr int kGroup = kB / kVec;     // lanes per block
  static_assert(kVec == 4, "f32; 16-bit inputs take the RowHalf kernels");
  static_assert(kRowUnroll == 4, "GatherPieces exchanges 4 vectors");
  __shared__ float enc_table[128];
  const int lane = threadIdx.x % 32;
  const int64_t vectors = p.elements / kVec;
  WaitForPrerequisiteGrids();  // the amax kernel (programmatic launch)

  for (int64_t ex = blockIdx.y; ex < p.batch; ex += gridDim.y) {
    const Nvfp4TensorScale ts = MakeNvfp4TensorScale(p.amax[ex]);
    FillEncodeTable(enc_table, ts);
    const uint32_t key0 = kSr ? p.key[2 * ex] : 0u;
    const uint32_t key1 = kSr ? p.key[2 * ex + 1] : 0u;
    // SR: the index offsets of the last dim and (rank 2) of the row, loaded
    // once.
    const uint32_t last_offset =
        kSr ? static_cast<uint32_t>(__ldg(p.sr.offset + p.sr.n - 1)) : 0u;
    const uint32_t row_offset =
        kSr && p.sr.n == 2 ? static_cast<uint32_t>(__ldg(p.sr.offset)) : 0u;
    const uint4* x = reinterpret_cast<const uint4*>(
        static_cast<const Storage*>(p.x) + ex * p.elements);
    // Packed codes: vector j is the kVec / 2 bytes from out + j * kVec / 2.
    uint8_t* out = p.row + ex * p.elements / 2;
    uint8_t* scale = p.row_scale + ex * p.blocks;

    // Every lane runs every step (out-of-range vectors are zeros whose
    // results are not stored), so the shuffles are full-warp.
    // The loads of step n + 1 are issued before step n's math: a lane always
    // has kRowUnroll vectors in flight (prefetched into `next`).
    const int64_t step = int64_t{gridDim.x} * kThreads * kRowUnroll;
    uint4 next[kRowUnroll];
    LoadRowVectors(x, int64_t{blockIdx.x} * kThreads * kRowUnroll, vectors, next);
    for (int64_t base = int64_t{blockIdx.x} * kThreads * kRowUnroll;
         base < vectors; base += step) {
      uint4 raw[kRowUnroll];
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) raw[u] = next[u];
      LoadRowVectors(x, base + step, vectors, next);
      // SR: where vector u = 0 lies (one division per step; the next
      // vectors, kThreads apart, by Advance).
      SrRowCursor at{};
      if constexpr (kSr) {
        at.row = DivMod((base + threadIdx.x) * kVec, p.l, p.narrow, at.col);
      }
      uint32_t piece[kRowUnroll];  // packed codes of vector u
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        const int64_t j = base + threadIdx.x + u * kThreads;
        const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
        float v[kVec];
        Unpack<In, kVec>(w, v);
        uint32_t key = RawKey<kVec>(v);
#pragma unroll
        for (int s = 1; s < kGroup; s *= 2) {
          key = max(key, __shfl_xor_sync(0xFFFFFFFFu, key, s));
        }
        const bool has_nan = key > kF32Inf;  // the same in the block's lanes
        if (__any_sync(0xFFFFFFFFu, has_nan)) {  // rare: drop the NaNs
          uint32_t clean = NanFreeKey<kVec>(v);
#pragma unroll
          for (int s = 1; s < kGroup; s *= 2) {
            clean = max(clean, __shfl_xor_sync(0xFFFFFFFFu, clean, s));
          }
          key = has_nan ? clean : key;
        }
        const uint32_t sdb = E4M3Byte(MulRn(__uint_as_float(key), ts.factor));
        const float enc = enc_table[sdb & 127u];
        uint32_t q[kVec / 4];
        if constexpr (kSr) {
          if (u > 0) at.Advance(p);
          // == SrMulti(p.sr, 0, n - 1, row) (rank 2: the row is its own
          // coordinate) and the last dim's SrTerm (its stride is 1).
          const uint64_t row_index =
              p.sr.n == 2 ? static_cast<uint64_t>(
                                static_cast<uint32_t>(at.row) + row_offset) *
                                p.sr.stride[0]
                          : SrMulti(p.sr, 0, p.sr.n - 1, at.row);
          const uint32_t last = static_cast<uint32_t>(at.col) + last_offset;
          EncodeSrRun<kVec>(v, enc, key0, key1, kRowwiseStream, row_index,
                            last, has_nan, q);
        } else if (has_nan) {
          EncodeExact<kVec>(v, enc, q);
        } else {
          EncodeFast<kVec>(v, enc, q);
        }
        piece[u] = PackNibbles4(q[0]);
        if (j < vectors && lane % kGroup == 0) {
          scale[j / kGroup] = static_cast<uint8_t>(sdb);
        }
      }
      // Lane r of each 4-lane group stores the group's 4 vectors of step
      // u = r: 8 contiguous bytes, streaming (the codes are not read again
      // here, x is).
      uint32_t mine[4];
      GatherPieces(piece, mine);
      const int64_t j0 = base + (threadIdx.x & ~3) + (lane & 3) * kThreads;
      const int64_t valid = min(int64_t{4}, vectors - j0);
      uint8_t* dst = out + j0 * (kVec / 2);
      const uint32_t lo = mine[0] | (mine[1] << 16);
      const uint32_t hi = mine[2] | (mine[3] << 16);
      if (valid == 4) {
        __stcs(reinterpret_cast<uint2*>(dst), make_uint2(lo, hi));
      } else {
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          if (s < valid) {
            reinterpret_cast<uint16_t*>(dst)[s] = static_cast<uint16_t>(mine[s]);
          }
        }
      }
    }
  }
}

template <typename In, bool kSr>
__global__ void __launch_bounds__(kThreads, kQuantizeMinBlocks<kSr>)
    RowScalarKernel(const __grid_constant__ RowParams p) {
  using Storage = typename In::Storage;
  __shared__ float enc_table[128];
  WaitForPrerequisiteGrids();  // the amax kernel (programmatic launch)
  for (int64_t ex = blockIdx.y; ex < p.batch; ex += gridDim.y) {
    const Nvfp4TensorScale ts = MakeNvfp4TensorScale(p.amax[ex]);
    FillEncodeTable(enc_table, ts);
    const uint32_t key0 = kSr ? p.key[2 * ex] : 0u;
    const uint32_t key1 = kSr ? p.key[2 * ex + 1] : 0u;
    const Storage* x = static_cast<const Storage*>(p.x) + ex * p.elements;
    uint8_t* scale = p.row_scale + ex * p.blocks;
    for (int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x;
         i < p.blocks; i += int64_t{gridDim.x} * kThreads) {
      int64_t lb;
      const int64_t row = DivMod(i, p.l_blocks, p.narrow, lb);
      const int64_t first = lb * kB;
      const int count = static_cast<int>(min(int64_t{kB}, p.l - first));
      const Storage* src = x + row * p.l + first;
      float v[kB];
#pragma unroll
      for (int e = 0; e < kB; ++e) {
        v[e] = e < count ? In::Convert(src[e]) : 0.0f;
      }
      const uint32_t raw = RawKey<kB>(v);
      const bool has_nan = raw > kF32Inf;
      const uint32_t key = has_nan ? NanFreeKey<kB>(v) : raw;
      const uint32_t sdb = E4M3Byte(MulRn(__uint_as_float(key), ts.factor));
      const float enc = enc_table[sdb & 127u];
      uint32_t q[4];
      if constexpr (kSr) {
        const uint64_t row_index = SrMulti(p.sr, 0, p.sr.n - 1, row);
        const uint32_t last =
            static_cast<uint32_t>(SrTerm(p.sr, p.sr.n - 1, first));
        EncodeSrRun<kB>(v, enc, key0, key1, kRowwiseStream, row_index, last,
                        has_nan, q);
      } else if (has_nan) {
        EncodeExact<kB>(v, enc, q);
      } else {
        EncodeFast<kB>(v, enc, q);
      }
      StorePackedCodes(p.row, ex * p.elements + row * p.l + first, q, count);
      scale[i] = static_cast<uint8_t>(sdb);
    }
  }
}

// ---------------------------------------------------------------------------
// Host side.

template <typename In, bool kSr>
Nvfp4LaunchStatus LaunchRows(const Nvfp4QuantizeProblem& pr,
                             const Nvfp4QuantizeBuffers& buf,
                             const SrLayout& sr, cudaStream_t stream) {
  const Nvfp4View& v = pr.view;
  RowParams p{};
  p.x = buf.x;
  p.amax = buf.amax;
  p.key = buf.key;
  p.row = buf.row;
  p.row_scale = buf.row_scale;
  p.batch = v.batch;
  p.elements = v.a * v.k * v.c * v.l;
  p.l = v.l;
  p.l_blocks = (v.l + kB - 1) / kB;
  p.blocks = (p.elements / v.l) * p.l_blocks;
  p.narrow = p.elements <= 0xFFFFFFFF;
  p.sr = sr;
  p.lane_rows = int64_t{kThreads} * In::kVec / v.l;
  p.lane_cols = int64_t{kThreads} * In::kVec % v.l;
  const unsigned grid_y =
      static_cast<unsigned>(std::min<int64_t>(v.batch, 65535));
  // 16-bit inputs: RowHalfKernel / RowHalfSrKernel wherever RowFastKernel
  // could run (and more); RowFastKernel is f32 only.
  if constexpr (In::kVec == 8) {
    if (v.l % kB == 0 && IsAligned(buf.x, 16) && IsAligned(buf.row, 4)) {
      if constexpr (kSr) {
        // S[1:] == G[1:]: RowHalfSrKernel's linear SR index may apply.
        const bool contiguous = std::equal(v.shape.begin() + 1, v.shape.end(),
                                           pr.global_shape.begin() + 1);
        return LaunchRowHalfSr<In>(buf, v.batch, p.elements, sr,
                                   contiguous, grid_y, stream);
      } else {
        return LaunchRowHalf<In>(buf, v.batch, p.elements, grid_y, stream);
      }
    }
  } else if (v.l % kB == 0 && IsAligned(buf.x, 16) && IsAligned(buf.row, 16) &&
             // A lane's store of packed codes: 4 vectors of kVec / 2 bytes,
             // aligned in every example (elements / 2 bytes apart).
             (v.batch == 1 || (p.elements / 2) % (2 * In::kVec) == 0)) {
    static const int per_sm = ResidentBlocks(RowFastKernel<In, kSr>, kThreads,
                                             kRowFastMinBlocks<kSr>);
    const int64_t vectors = p.elements / In::kVec;
    const int64_t want = CeilDiv(vectors, int64_t{kThreads} * kRowUnroll);
    const int64_t room = std::max<int64_t>(1, SmCount() * per_sm / grid_y);
    // With stochastic rounding (instruction-bound) one CTA per 4 steps of
    // 1024 vectors: the CTA's prologue (the 128 encode multipliers, the key)
    // is a third of a one-step CTA's instructions, and a persistent wave's
    // last CTAs leave SMs idle. Fewer steps per CTA where 4 would leave
    // resident slots empty (1024^2: 32 CTAs on 132 SMs), so that a small
    // input still fills one wave. Without SR, a persistent wave.
    const int64_t steps = std::clamp<int64_t>(CeilDiv(want, room), 1,
                                              kSrSteps);  // per CTA, SR
    return LaunchPdl(RowFastKernel<In, kSr>,
                     dim3(GridSize(kSr ? CeilDiv(want, steps)
                                       : std::min(want, room)),
                          grid_y),
                     stream, p,
                     "launching RowFastKernel");
  }
  static const int per_sm = ResidentBlocks(RowScalarKernel<In, kSr>, kThreads,
                                           kQuantizeMinBlocks<kSr>);
  const int64_t want = CeilDiv(p.blocks, int64_t{kThreads});
  const int64_t room = std::max<int64_t>(1, SmCount() * per_sm * 2 / grid_y);
  return LaunchPdl(RowScalarKernel<In, kSr>,
                   dim3(GridSize(std::min(want, room)), grid_y), stream, p,
                   "launching RowScalarKernel");
}

// The rowwise-only problems (no colwise part, no 2D).
template <bool kSr>
Nvfp4LaunchStatus DispatchRows(const Nvfp4QuantizeProblem& pr,
                               const Nvfp4QuantizeBuffers& buf,
                               const SrLayout& sr, cudaStream_t stream) {
  switch (pr.view.input_type) {
    case InputType::kF32: return LaunchRows<F32In, kSr>(pr, buf, sr, stream);
    case InputType::kF16: return LaunchRows<F16In, kSr>(pr, buf, sr, stream);
    case InputType::kBF16: return LaunchRows<Bf16In, kSr>(pr, buf, sr, stream);
  }
  return Nvfp4LaunchStatus{false, 0, "unknown input type"};
}

}  // namespace

Nvfp4LaunchStatus Nvfp4Quantize(const Nvfp4QuantizeProblem& problem,
                                const Nvfp4QuantizeBuffers& buffers,
                                CUstream_st* stream) {
  const Nvfp4View& v = problem.view;
  if (v.batch * v.a * v.k * v.c * v.l == 0) return Nvfp4LaunchStatus{};
  SrLayout sr{};
  if (problem.stochastic_rounding) {
    const int n = static_cast<int>(v.shape.size());
    if (n > kMaxSrRank) {
      return Nvfp4LaunchStatus{
          false, 0, "stochastic rounding supports per-example ranks up to 32"};
    }
    sr.offset = buffers.offset;
    sr.n = n;
    sr.narrow = v.a * v.k * v.c * v.l <= 0xFFFFFFFF;
    for (int d = 0; d < n; ++d) sr.shape[d] = v.shape[d];
    Nvfp4SrStrides(problem.global_shape, v.k_axis, sr.stride, sr.col_stride);
  } else {
    sr.n = static_cast<int>(v.shape.size());
  }
  if (PanelsApply(problem, buffers)) {
    return LaunchPanels(problem, buffers, sr, stream);
  }
  if (problem.colwise || problem.use_2d) {
    return LaunchTiles(problem, buffers, sr, stream);
  }
  if (problem.stochastic_rounding) {
    return DispatchRows<true>(problem, buffers, sr, stream);
  }
  return DispatchRows<false>(problem, buffers, sr, stream);
}

}  // namespace eqx_quant::cuda
