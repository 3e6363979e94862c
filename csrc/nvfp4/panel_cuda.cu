// CUDA kernel of eqx_quant_nvfp4_quantize for sm_90a: 1D colwise NVFP4 (with
// or without the RHT, with or without stochastic rounding, rowwise optional),
// and 2D NVFP4 with a colwise part for 16-bit input without stochastic
// rounding (k2d, Panel2d: one encode per tile row serves both parts), when
// every colwise block is whole and every row is whole 16-byte vectors
// (PanelsApply). Bit-exact with the CPU kernel; nvfp4/tile_cuda.cu
// serves the other colwise and 2D problems.
//
// PanelKernel (256 threads, one CTA per 128 rows x 32 vectors, nothing
// allocated): a thread owns a panel, the 16 rows of one colwise block (16
// consecutive k of one a, i.e. 16 consecutive rows of the (A * K) x W matrix,
// W = C * L) times one 16-byte column vector (kVec = 8 bf16 / f16 or 4 f32
// columns). Its 16 vectors are copied to shared memory with cp.async (a
// warp's copy of one row is 512 contiguous bytes; warp w holds the CTA's
// panel w, lane v its vector v) and read back by the thread alone:
//   * rowwise first, per row: a 16-element block is 16 / kVec consecutive
//     lanes; the block amax is a shuffle over them (and the NaN-free one, only
//     in a block that holds a NaN, over the same lanes); each lane encodes its
//     kVec elements (a warp's store is 128 contiguous bytes of codes) and
//     the block's first lane stores the scale byte. SR: the random bytes of
//     a row's kVec elements from SrRunBytes, or for 16-bit inputs, where the
//     16 rows' octet counters step linearly (OctetRuns: the usual layouts),
//     from one Threefry call on the row's counter.
//   * colwise, kVec / 4 columns per step (one 4-byte word of each row; the
//     word is rotated by lane / 8 so that a warp's loads are conflict-free):
//     the 16 values (RHT'd with Rht16Exact when kRht), their block amax, scale
//     byte and 16 codes, staged in the words the step has just consumed. SR:
//     the 16 elements of a colwise block have consecutive colwise indices (the
//     K dim is the last of the T layout), so two Threefry calls serve them
//     (SrRunBytes; for 16-bit inputs, where the thread's 8 columns' counters
//     step linearly, OctetRuns). The counters are derived once per thread in
//     both parts, which saves about a tenth of the SR kernel's
//     instructions.
//   * after a barrier the CTA writes the staged outputs to the T layout (c,
//     l, a, k) (StoreStagedColumns, nvfp4/panel_staging_cuda.cuh):
//     64 contiguous code bytes per column line (the CTA's 8 panels), 16 per
//     thread (per-thread 8-byte stores, each 32-byte sector written by four
//     CTAs' warps and each scale byte alone, keep L2 busy and DRAM idle).
// 16-bit inputs without SR keep their values packed where they can (as
// RowHalfKernel): the colwise block's 16 values are 8 words of 16-bit pairs
// (the RHT's bf16 outputs straight from its converts, else the column's
// halves of the rows' words gathered by PRMT), so the block key is a max over
// halves and the codes come from HalfCodeWord8 (the magnitudes in pairs on the
// FMA pipe, the signs from the words); rowwise likewise per lane. Blocks with
// a NaN take the unpacked path. Per panel and thread ~4,800 instead of ~6,000
// instructions (bf16, RHT).
// The copies are issued before the wait for the amax kernel (programmatic
// dependent launch); the CTA then builds the encode multipliers of the 128
// possible scale bytes of each part (an IEEE division each; / 8 for the
// packed paths where that is exact).
// The loops stay loops: the fully unrolled form (panel in registers) is
// about five times the instructions and stalls on instruction fetch.
// No spills in any loop (ptxas -warn-spills is on in CMake): the 16-bit RHT
// variants without SR keep 4 values in local memory, stored once and loaded
// once per example; the SR kernels are at their cap of 128 registers (2 CTAs
// per SM).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/nvfp4_format.h"
#include "common/nvfp4_problem.h"
#include "common/rht.h"
#include "cuda/sm_count.h"
#include "nvfp4/device_cuda.cuh"
#include "nvfp4/half_codes_cuda.cuh"
#include "nvfp4/panel_2d_cuda.cuh"
#include "nvfp4/panel_staging_cuda.cuh"
#include "nvfp4/quantize_cuda.h"

namespace eqx_quant::cuda::nvfp4 {
namespace {

constexpr int kWarps = kPanelWarps;  // panels per CTA
constexpr int kThreads = kPanelThreads;
// Resident CTAs per SM: 3 (64 KiB of shared memory each, <= 85 registers);
// 2 with stochastic rounding (<= 128 registers: the Threefry calls).
template <bool kSr>
constexpr int kMinBlocks = kSr ? 2 : 3;

struct PanelParams {
  const void* x;
  const float* amax;
  const float* col_amax;
  const uint32_t* key;  // kSr: batch x 2 Threefry key words
  uint8_t* row;  // null: no rowwise part
  uint8_t* row_scale;
  uint8_t* col;
  uint8_t* col_scale;
  int64_t batch;
  int64_t width;     // W = C * L
  int64_t vectors;   // W / kVec
  int64_t panels;    // A * K / 16 per example
  int64_t ak;        // A * K: col elements between consecutive columns
  uint32_t vector_groups;  // ceil(vectors / 32)
  float rht_factor[kRhtSize];  // R[i][0]
  // kSr: where an element lies in S (the SR index), as in the tile kernel.
  int64_t k_panels;  // K / 16
  int64_t l;         // L
  int k_axis;        // index of K in S
  SrLayout sr;
};

// The packed codes of one lane's kVec elements of a row, `packed` (kVec
// nibbles, element 0 in the low one), to `at` (kVec / 2 bytes, aligned).
template <int kVec>
__device__ __forceinline__ void StoreRowCodes(uint8_t* at, uint32_t packed) {
  if constexpr (kVec == 8) {
    __stcs(reinterpret_cast<unsigned int*>(at), packed);
  } else {
    __stcs(reinterpret_cast<unsigned short*>(at),
           static_cast<unsigned short>(packed));
  }
}

// The kVec codes of one word per byte (q) packed into nibbles.
template <int kVec>
__device__ __forceinline__ uint32_t PackRowCodes(const uint32_t (&q)[kVec / 4]) {
  if constexpr (kVec == 8) {
    return PackNibbles8(q[0], q[1]);
  } else {
    return PackNibbles4(q[0]);
  }
}

// The 16 stochastically rounded codes of a NaN-free colwise block, packed
// (element 0 in the low nibble of word 0): y = v * enc, the signs of y.
__device__ __forceinline__ uint2 ColSrCodes(const float (&v)[kB], float enc,
                                            const uint32_t (&rbytes)[4]) {
  float y0[8];
  float y1[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    y0[e] = MulRn(v[e], enc);
    y1[e] = MulRn(v[8 + e], enc);
  }
  const uint32_t r0[2] = {rbytes[0], rbytes[1]};
  const uint32_t r1[2] = {rbytes[2], rbytes[3]};
  return make_uint2(E2M1StochasticWord8Signed(y0, r0),
                    E2M1StochasticWord8Signed(y1, r1));
}

// The panels in shared memory, the staging rows and their write-out
// (StoreStagedColumns): nvfp4/panel_staging_cuda.cuh.

// Element `sub` of a word of In's storage (kVec / 4 elements per word).
template <typename In>
__device__ __forceinline__ float ElementOfWord(uint32_t word, int sub) {
  const uint32_t w[4] = {word, word, word, word};
  return In::Element(w, sub);  // reads w[sub / (kVec / 4)] = word
}

template <typename In, bool kRht, bool kSr, bool k2d>
__global__ void __launch_bounds__(kThreads, kMinBlocks<kSr>)
    PanelKernel(const __grid_constant__ PanelParams p) {
  using Storage = typename In::Storage;
  constexpr int kVec = In::kVec;
  constexpr int kPerWord = kVec / 4;         // columns per 4-byte word
  constexpr int kLanesPerBlock = kB / kVec;  // rowwise block: 2 or 4 lanes
  // 16-bit inputs without SR: the packed paths (HalfBlockCodes,
  // HalfRowCodes); the colwise values are bf16 after the RHT, else In's.
  constexpr bool kPacked = kVec == 8 && !kSr;
  static_assert(!k2d || (kPacked && !kRht), "2D panels: 16-bit, no SR or RHT");
  using ColElem = std::conditional_t<kRht, Bf16In, In>;
  extern __shared__ __align__(16) uint8_t panel_smem[];
  __shared__ float enc_table[2][128];  // rowwise, colwise

  const int t = threadIdx.x;
  const int lane = t % 32;
  const uint32_t group = blockIdx.x / p.vector_groups;
  const uint32_t vector_group = blockIdx.x - group * p.vector_groups;
  const int64_t panel = int64_t{group} * kWarps + t / 32;
  const int64_t vector = int64_t{vector_group} * 32 + lane;
  // vectors % kLanesPerBlock == 0: a block's lanes are all live or none.
  const bool live = panel < p.panels && vector < p.vectors;
  const int64_t col0 = vector * kVec;  // first column, of W
  const int64_t elements = p.panels * kB * p.width;
  // Row i of this thread's panel: 16 bytes at mine + i * kPanelRowBytes.
  uint8_t* const mine =
      panel_smem + (t / 32) * (kB * kPanelRowBytes) + lane * 16;

  for (int64_t ex = blockIdx.y; ex < p.batch; ex += gridDim.y) {
    // This thread's 16 rows: elements (16 panel + i) * W + col0 of example ex.
    const int64_t first = ex * elements + panel * kB * p.width + col0;
    {
      const Storage* src = static_cast<const Storage*>(p.x) + first;
#pragma unroll
      for (int i = 0; i < kB; ++i) {
        AsyncCopy16(mine + i * kPanelRowBytes, live ? src + i * p.width : p.x,
                    live);
      }
      AsyncCommit();
    }
    // The amax kernel (programmatic launch) has finished from here on.
    WaitForPrerequisiteGrids();
    const Nvfp4TensorScale col_t = MakeNvfp4TensorScale(p.col_amax[ex]);
    const Nvfp4TensorScale row_t =
        p.row != nullptr ? MakeNvfp4TensorScale(p.amax[ex]) : col_t;
    __syncthreads();  // the last example's table readers are done
    const float enc = Nvfp4EncodeMultiplier(static_cast<uint8_t>(t % 128),
                                            t < 128 ? row_t : col_t);
    enc_table[t / 128][t % 128] = enc;
    __syncthreads();
    // kPacked: the multipliers / 8 where that is exact for every scale byte
    // (kSmallestMultiplierByte). Read from the table, so that no thread
    // divides again (those divisions' calls made ptxas spill).
    bool row_scaled = false;
    bool col_scaled = false;
    if constexpr (kPacked) {
      row_scaled = EighthIsExact(enc_table[0][kSmallestMultiplierByte]);
      col_scaled = EighthIsExact(enc_table[1][kSmallestMultiplierByte]);
      __syncthreads();  // every thread has read those entries
      if (t < 128 ? row_scaled : col_scaled) {
        enc_table[t / 128][t % 128] = MulRn(enc, 0.125f);
      }
      __syncthreads();
    }
    AsyncWaitGroup<0>();  // this thread's panel is in

    // kSr: the A and C terms of this thread's rowwise and colwise SR
    // indices, the last dim's coordinate of its first column and the K
    // coordinate of its first row.
    uint64_t sr_base = 0;
    uint64_t sr_col_base = 0;
    uint32_t key0 = 0;
    uint32_t key1 = 0;
    int64_t l0 = 0;
    int64_t k0 = 0;
    if constexpr (kSr) {
      int64_t kb;
      const int64_t a = DivMod(panel, p.k_panels, p.sr.narrow, kb);
      const int64_t c = DivMod(col0, p.l, p.sr.narrow, l0);
      k0 = kb * kB;
      sr_base = SrMulti(p.sr, 0, p.k_axis, a) +
                SrMulti(p.sr, p.k_axis + 1, p.sr.n - 1, c);
      sr_col_base = SrMulti<true>(p.sr, 0, p.k_axis, a) +
                    SrMulti<true>(p.sr, p.k_axis + 1, p.sr.n - 1, c);
      key0 = p.key[2 * ex];
      key1 = p.key[2 * ex + 1];
    }

    if constexpr (k2d) {
      const bool same_scale = __float_as_uint(p.amax[ex]) ==
                              __float_as_uint(p.col_amax[ex]);
      Panel2d<In>(
          mine, p.row, p.row_scale, first, p.width, live, same_scale,
          row_scaled, col_scaled, row_t.factor, col_t.factor, enc_table[0],
          enc_table[1]);
    }

    // Rowwise first: the colwise pass below stages its outputs in the
    // panel's words as it consumes them.
    if (!k2d && p.row != nullptr) {
      // The lanes of this thread's rowwise block (for the rare NaN shuffle).
      const unsigned block_lanes = ((1u << kLanesPerBlock) - 1u)
                                   << (lane & ~(kLanesPerBlock - 1));
      // Row i's kVec codes at byte (first + i * W) / 2 of the rowwise
      // output, its block's scale at (first + i * W) / 16 (W % 16 == 0).
      uint8_t* row_out = p.row + first / 2;
      uint8_t* row_scale_out = p.row_scale + first / kB;
      const bool scale_lane = lane % kLanesPerBlock == 0;
      // SR, 16-bit inputs: the counters of the 16 rows' octets, where they
      // step linearly (the usual layouts), else SrRunBytes per row.
      OctetRuns octets{};
      if constexpr (kSr && kVec == 8) {
        octets = MakeOctetRuns<kB, 1>(
            SrShifted(p.sr, p.k_axis, k0), p.sr.stride[p.k_axis], sr_base,
            static_cast<uint32_t>(SrTerm(p.sr, p.sr.n - 1, l0)), kRowwiseStream);
      }
#pragma unroll 1
      for (int i = 0; i < kB; ++i) {
        const uint4 four =
            *reinterpret_cast<const uint4*>(mine + i * kPanelRowBytes);
        const uint32_t w[4] = {four.x, four.y, four.z, four.w};
        uint32_t sdb;
        uint32_t packed;  // this lane's kVec codes
        if constexpr (kPacked) {
          packed = row_scaled ? HalfRowCodes<In, true>(w, row_t.factor,
                                                       enc_table[0],
                                                       block_lanes, sdb)
                              : HalfRowCodes<In, false>(w, row_t.factor,
                                                        enc_table[0],
                                                        block_lanes, sdb);
        } else {
          float v[kVec];
#pragma unroll
          for (int e = 0; e < kVec; ++e) v[e] = In::Element(w, e);
          const uint32_t raw = RawKey<kVec>(v);
          uint32_t key = raw;
#pragma unroll
          for (int s = 1; s < kLanesPerBlock; s *= 2) {
            key = max(key, __shfl_xor_sync(0xFFFFFFFFu, key, s));
          }
          if (key > kF32Inf) {  // the block has a NaN: all its lanes are here
            key = NanFreeKey<kVec>(v);
#pragma unroll
            for (int s = 1; s < kLanesPerBlock; s *= 2) {
              key = max(key, __shfl_xor_sync(block_lanes, key, s));
            }
          }
          sdb = E4M3Byte(MulRn(__uint_as_float(key), row_t.factor));
          const float enc = enc_table[0][sdb & 127u];
          if constexpr (kSr) {
            uint32_t rbytes[kVec / 4];
            if constexpr (kVec == 8) {
              if (octets.linear) {
                Threefry2x32(key0, key1,
                             octets.lo + static_cast<uint32_t>(i) * octets.step,
                             octets.hi, rbytes[0], rbytes[1]);
              }
            }
            if (kVec != 8 || !octets.linear) {
              SrRunBytes<kVec>(key0, key1, kRowwiseStream,
                               sr_base + SrTerm(p.sr, p.k_axis, k0 + i),
                               static_cast<uint32_t>(SrTerm(p.sr, p.sr.n - 1, l0)),
                               rbytes);
            }
            if constexpr (kVec == 8) {
              if (!__any_sync(0xFFFFFFFFu, raw > kF32Inf)) {  // the usual case
                packed = EncodeSrWord8(v, enc, rbytes, w);
              } else {
                uint32_t q[2];
                EncodeSrBytes<8>(v, enc, rbytes, raw > kF32Inf, q);
                packed = PackNibbles8(q[0], q[1]);
              }
            } else {
              uint32_t q[1];
              EncodeSrBytes<4>(v, enc, rbytes, raw > kF32Inf, q);
              packed = PackNibbles4(q[0]);
            }
          } else {
            uint32_t q[kVec / 4];
            if (raw > kF32Inf) {  // this lane's elements hold the NaN
              EncodeExact<kVec>(v, enc, q);
            } else {
              EncodeFast<kVec>(v, enc, q);
            }
            packed = PackRowCodes<kVec>(q);
          }
        }
        if (live) {
          StoreRowCodes<kVec>(row_out, packed);
          if (scale_lane) *row_scale_out = static_cast<uint8_t>(sdb);
        }
        row_out += p.width / 2;
        row_scale_out += p.width / kB;
      }
    }

    // Colwise, kPerWord columns per step: word jw of the vector (rotated by
    // lane / 8 so that a warp's 4-byte loads hit 32 distinct banks).
    // SR, 16-bit inputs: the counters of the 8 columns' runs (16 K
    // coordinates each, two octets), where they step linearly.
    OctetRuns col_octets{};
    if constexpr (kSr && kVec == 8) {
      col_octets = MakeOctetRuns<kVec, 2>(
          SrShifted(p.sr, p.sr.n - 1, l0), p.sr.col_stride[p.sr.n - 1],
          sr_col_base, static_cast<uint32_t>(SrTerm<true>(p.sr, p.k_axis, k0)),
          kColwiseStream);
    }
#pragma unroll 1
    for (int step = 0; step < (k2d ? 0 : 4); ++step) {
      const int jw = (step + lane / 8) % 4;
      uint32_t words[kB];
#pragma unroll
      for (int i = 0; i < kB; ++i) {
        words[i] = *reinterpret_cast<const uint32_t*>(
            mine + i * kPanelRowBytes + 4 * jw);
      }
#pragma unroll
      for (int sub = 0; sub < kPerWord; ++sub) {
        uint32_t sdb;
        uint2 codes;  // the block's 16 codes, packed
        if constexpr (kPacked) {
          uint32_t packed[kB / 2];
          if constexpr (kRht) {
            float v[kB];
#pragma unroll
            for (int i = 0; i < kB; ++i) v[i] = ElementOfWord<In>(words[i], sub);
            Rht16ExactPacked<true>(v, p.rht_factor, packed);
          } else {
            ColumnPairs(words, sub, packed);
          }
          codes = col_scaled ? HalfBlockCodes<ColElem, true>(
                                   packed, col_t.factor, enc_table[1], sdb)
                             : HalfBlockCodes<ColElem, false>(
                                   packed, col_t.factor, enc_table[1], sdb);
        } else {
          float v[kB];
#pragma unroll
          for (int i = 0; i < kB; ++i) v[i] = ElementOfWord<In>(words[i], sub);
          if constexpr (kRht) {
            float rotated[kB];
            Rht16Exact<kVec == 8>(v, p.rht_factor, rotated);
#pragma unroll
            for (int i = 0; i < kB; ++i) v[i] = rotated[i];
          }
          const uint32_t raw = RawKey<kB>(v);
          const bool has_nan = raw > kF32Inf;
          // A block with a NaN is rare: the NaN-free key (and SR's NaN-aware
          // encode) only in a warp that has one, behind a uniform branch.
          const bool warp_nan = __any_sync(0xFFFFFFFFu, has_nan);
          uint32_t key = raw;
          if (warp_nan) key = has_nan ? NanFreeKey<kB>(v) : raw;
          sdb = E4M3Byte(MulRn(__uint_as_float(key), col_t.factor));
          const float enc = enc_table[1][sdb & 127u];
          if constexpr (kSr) {
            // The block's colwise indices: its column's terms, then the K
            // coordinates k0 .. k0 + 15 (stride 1 in the T layout).
            uint32_t rbytes[4];
            if constexpr (kVec == 8) {
              if (col_octets.linear) {
                const uint32_t lo =
                    col_octets.lo +
                    static_cast<uint32_t>(jw * kPerWord + sub) * col_octets.step;
                Threefry2x32(key0, key1, lo, col_octets.hi, rbytes[0], rbytes[1]);
                Threefry2x32(key0, key1, lo + 1u, col_octets.hi, rbytes[2],
                             rbytes[3]);
              }
            }
            if (kVec != 8 || !col_octets.linear) {
              SrRunBytes<kB>(
                  key0, key1, kColwiseStream,
                  sr_col_base +
                      SrTerm<true>(p.sr, p.sr.n - 1, l0 + jw * kPerWord + sub),
                  static_cast<uint32_t>(SrTerm<true>(p.sr, p.k_axis, k0)),
                  rbytes);
            }
            if (warp_nan) {
              uint32_t q[4];
              EncodeSrBytes<kB>(v, enc, rbytes, has_nan, q);
              codes = make_uint2(PackNibbles8(q[0], q[1]),
                                 PackNibbles8(q[2], q[3]));
            } else {
              codes = ColSrCodes(v, enc, rbytes);
            }
          } else {
            uint32_t q[4];
            if (has_nan) {
              EncodeExact<kB>(v, enc, q);
            } else {
              EncodeFast<kB>(v, enc, q);
            }
            codes = make_uint2(PackNibbles8(q[0], q[1]),
                               PackNibbles8(q[2], q[3]));
          }
        }
        // Staged in this thread's words jw, consumed above.
        uint32_t* const slot = reinterpret_cast<uint32_t*>(mine + 4 * jw);
        constexpr int kRowWords = kPanelRowBytes / 4;
        slot[StagedCodeRow(sub) * kRowWords] = codes.x;
        slot[(StagedCodeRow(sub) + 1) * kRowWords] = codes.y;
        slot[StagedScaleRow<kPerWord>(sub) * kRowWords] = sdb;
      }
    }
    __syncthreads();  // every panel's colwise outputs are staged
    StoreStagedColumns<kVec>(p, panel_smem, ex, group, vector_group);
    // The next example's copies overwrite the slots read above.
    __syncthreads();

  }
}

template <typename In, bool kRht, bool kSr, bool k2d>
Nvfp4LaunchStatus LaunchTyped(const Nvfp4QuantizeProblem& pr,
                              const Nvfp4QuantizeBuffers& buf,
                              const SrLayout& sr, cudaStream_t stream) {
  const Nvfp4View& v = pr.view;
  PanelParams p{};
  p.x = buf.x;
  p.amax = buf.amax;
  p.col_amax = buf.col_amax;
  p.key = buf.key;
  p.row = pr.rowwise ? buf.row : nullptr;
  p.row_scale = buf.row_scale;
  p.col = buf.col;
  p.col_scale = buf.col_scale;
  p.batch = v.batch;
  p.width = v.c * v.l;
  p.vectors = p.width / In::kVec;
  p.panels = v.a * v.k / kB;
  p.ak = v.a * v.k;
  const int64_t vector_groups = CeilDiv(p.vectors, int64_t{32});
  const int64_t ctas = CeilDiv(p.panels, int64_t{kWarps}) * vector_groups;
  p.vector_groups = static_cast<uint32_t>(vector_groups);
  p.k_panels = v.k / kB;
  p.l = v.l;
  p.k_axis = static_cast<int>(v.k_axis);
  p.sr = sr;
  if (kRht) {
    const RhtMatrix m = MakeRhtMatrix(pr.rht_sign_mask);
    for (int i = 0; i < kRhtSize; ++i) p.rht_factor[i] = m.col[0][i];
  }
  const unsigned grid_y =
      static_cast<unsigned>(std::min<int64_t>(v.batch, 65535));
  static const cudaError_t allowed = cudaFuncSetAttribute(
      PanelKernel<In, kRht, kSr, k2d>,
      cudaFuncAttributeMaxDynamicSharedMemorySize,
      kPanelBytes);
  if (allowed != cudaSuccess) {
    cudaGetLastError();
    return Nvfp4LaunchStatus{false, static_cast<int>(allowed),
                             "allowing PanelKernel 64 KiB of shared memory"};
  }
  return LaunchPdl(PanelKernel<In, kRht, kSr, k2d>,
                   dim3(static_cast<unsigned>(ctas), grid_y), stream, p,
                   "launching PanelKernel", kPanelBytes);
}

}  // namespace

bool PanelsApply(const Nvfp4QuantizeProblem& problem,
                 const Nvfp4QuantizeBuffers& buffers) {
  const Nvfp4View& v = problem.view;
  const int64_t vec = v.input_type == InputType::kF32 ? 4 : 8;
  if (!problem.colwise) return false;
  if (problem.use_2d && (v.input_type == InputType::kF32 || problem.use_rht ||
                         problem.stochastic_rounding)) {
    return false;  // the tile kernel's
  }
  if (v.k % kB != 0 || v.l % kB != 0 || !IsAligned(buffers.x, 16) ||
      !IsAligned(buffers.col, 8) ||
      (problem.rowwise && !IsAligned(buffers.row, 4))) {
    return false;
  }
  const int64_t width = v.c * v.l;
  const int64_t ctas = CeilDiv(v.a * v.k / kB, int64_t{kWarps}) *
                       CeilDiv(width / vec, int64_t{32});
  // 2D: at least a CTA per two SMs, else the tile kernel's 64 x 64 tiles
  // spread the work better.
  if (problem.use_2d &&
      2 * ctas * std::min<int64_t>(v.batch, 65535) < int64_t{SmCount()}) {
    return false;
  }
  return ctas <= 0x7FFFFFFF;
}

Nvfp4LaunchStatus LaunchPanels(const Nvfp4QuantizeProblem& problem,
                               const Nvfp4QuantizeBuffers& buffers,
                               const SrLayout& sr, cudaStream_t stream) {
  return DispatchInputAndModes(problem, [&](auto input, auto rht, auto sr_on) {
    using In = decltype(input);
    constexpr bool kRht = decltype(rht)::value;
    constexpr bool kSr = decltype(sr_on)::value;
    if constexpr (In::kVec == 8 && !kRht && !kSr) {
      if (problem.use_2d) {
        return LaunchTyped<In, false, false, true>(problem, buffers, sr, stream);
      }
    }
    return LaunchTyped<In, kRht, kSr, false>(problem, buffers, sr, stream);
  });
}

}  // namespace eqx_quant::cuda::nvfp4
