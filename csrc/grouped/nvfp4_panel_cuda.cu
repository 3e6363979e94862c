// GroupedPanelKernel: eqx_quant_grouped_nvfp4_quantize for sm_90a with a
// colwise part, for bf16 / f16 without 2D scaling (kSr: with stochastic
// rounding), N % 8 == 0 (N % 16 == 0 with a rowwise part), N >= 512, aligned
// buffers and a grid of at least one wave (Nvfp4PanelsApply): the colwise part
// alone, or both parts in one read of x. Launched by GroupedNvfp4Quantize
// (grouped/nvfp4_cuda.cu) after the scale buffers' memset; the same
// bytes as the generic TileKernel there and as the CPU kernel. Compiled with
// --fmad=false --ftz=false --prec-div=true.
//
// The dense PanelKernel's plan (nvfp4/panel_cuda.cu) on the grouped
// units of grouped/device_cuda.cuh (64 rows, aligned at each
// group's start; LocateTile gives the group, its rows and its scale
// regions):
//   * a CTA owns one unit x kCtaVectors 16-byte column vectors (512
//     columns), and where the grid keeps two waves of working CTAs, two such
//     chunks one after the other (its group's lookup and encode table once
//     for both); warp w holds panel w % 4 (rows 16 (w % 4) .. + 15 of the
//     unit) of vector group w / 4, lane v its vector v: 16 rows x 16 bytes,
//     copied to its own shared slots by cp.async (rows past the group:
//     zeros, which change no block amax);
//   * rowwise first (kRow), per row: a block is two adjacent lanes
//     (HalfRowCodes), a lane's 8 codes one 4-byte store (a warp store: 128
//     contiguous bytes), the block's scale byte by its first lane;
//   * colwise, per step a thread reads word jw (2 columns) of its 16 rows
//     (rotated by lane / 8: conflict-free), and per column the block's 16
//     values as 16-bit pairs (ColumnPairs) give its scale byte and 16 packed
//     codes (HalfBlockCodes; a block with a NaN takes the exact unpacked
//     path), staged in the words the step has consumed;
//   * after a barrier the CTA stores each column's T-row segment: the unit's
//     count = min(64, rows_g - u0) codes of T row n of the group, elements
//     start_g * N + n * rows_g + u0 .. (+ the example's offset), which start
//     at any nibble (rows_g is arbitrary): 8 lanes per segment, each loads
//     one staged code word, takes its neighbour's by a shuffle and stores
//     one destination word (the last lane also the 9th), plain where the
//     word is the segment's alone, masked atomics at its two ends (another
//     CTA's segment may share the word); then the column's 4 scale bytes as
//     one word of the swizzled layout (u0 / 16 is a multiple of 4).
// Tail units zero the data of rows past the last group, as TileKernel's do.
// Stochastic rounding (kSr): the group's key, the
// encode table unscaled; a row's 8 values are one octet of the group's
// rowwise indices i * N + n (one Threefry call), a column block's 16 values
// a run of its T-layout indices n * rows_g + r from u0 + 16 panel
// (SrRunBytes: 2 calls where rows_g % 8 == 0, else 3); HalfRowSrCodes /
// HalfBlockSrCodes encode.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/grouped_layout.h"
#include "common/grouped_problem.h"
#include "common/nvfp4_format.h"
#include "cuda/cp_async.cuh"
#include "cuda/sm_count.h"
#include "grouped/device_cuda.cuh"
#include "grouped/quantize_cuda.h"
#include "nvfp4/device_cuda.cuh"
#include "nvfp4/half_codes_cuda.cuh"
#include "nvfp4/half_sr_codes_cuda.cuh"

namespace eqx_quant::cuda {
namespace {

using grouped_dev::Aligned;
using grouped_dev::CheckLaunch;
using grouped_dev::Fail;
using grouped_dev::GroupsEnd;
using grouped_dev::kThreads;
using grouped_dev::kWarps;
using grouped_dev::LocateShared;
using grouped_dev::LocateTile;
using grouped_dev::RegionSpec;
using grouped_dev::RowSpec;
using grouped_dev::TileGrid;
using nvfp4::Bf16In;
using nvfp4::F16In;
using nvfp4::kB;  // 16

constexpr int kVec = 8;                          // 16-bit values per vector
constexpr int kUnitRows = 64;                    // rows of a unit
constexpr int kPanels = kUnitRows / kB;          // panels of a unit: 4
constexpr int kVectorGroups = kWarps / kPanels;  // per CTA: 2
constexpr int kCtaVectors = kVectorGroups * 32;  // 64
constexpr int kCtaCols = kCtaVectors * kVec;     // 512 columns, T rows
constexpr int kPanelRowBytes = 32 * 16;          // a warp's copy of a row
constexpr int kWarpBytes = kB * kPanelRowBytes;  // 8 KiB
constexpr int kSmemBytes = kWarps * kWarpBytes;  // 64 KiB per CTA
constexpr int kRowWords = kPanelRowBytes / 4;
// Resident CTAs per SM: 3 (64 KiB of shared memory each, <= 85 registers;
// ptxas spills 4-100 bytes, mostly in the per-chunk copy setup), with or
// without stochastic rounding (SR at 2 CTAs, 128 registers and no spills,
// is slower).
constexpr int kMinBlocks = 3;
// The segment stores: 8 lanes per segment (its 8 code words).
constexpr int kLanesPerSegment = 8;

struct PanelParams {
  const void* x;
  const float* amax;  // batch x G
  const int32_t* group_sizes;
  uint32_t* row;  // kRow; 8 codes per word
  uint8_t* row_scale;
  uint32_t* col;  // 8 codes per word
  uint8_t* col_scale;
  int64_t batch;
  RowSpec rs;  // R, U
  int64_t cols;     // N
  int64_t vectors;  // N / 8
  int64_t groups;
  int64_t row_scale_bytes;  // per example
  int64_t col_scale_bytes;  // per example
  int64_t row_q_cols;       // pad4(ceil(N / 16)): the rowwise regions' columns
  int64_t group_units;      // W(R, G, 64)
  int64_t chunks;           // ceil(N / 512)
  const uint32_t* keys;     // SR: batch x G x 2 key words
};

// Where a thread stages column `sub` (0, 1) of the step that read its words
// jw: the codes' two words in rows 2 sub and 2 sub + 1, the scale byte in
// row 4 + sub (rows of its own slots).
__device__ __forceinline__ constexpr int StagedCodeRow(int sub) {
  return 2 * sub;
}
__device__ __forceinline__ constexpr int StagedScaleRow(int sub) {
  return 4 + sub;
}

// Nibbles first .. end - 1 of `value` into *word (nothing if end <= first):
// a plain store where the word is the segment's alone, else masked atomics
// (another segment, maybe another CTA's, owns the word's other nibbles; the
// two pairs commute, whatever the word held before).
__device__ __forceinline__ void StoreNibbles(uint32_t* word, uint32_t value,
                                             int first, int end) {
  if (end <= first) return;
  if (first == 0 && end == 8) {
    __stcs(word, value);
    return;
  }
  const uint32_t mask = ((1u << (4 * (end - first))) - 1u) << (4 * first);
  atomicAnd(word, ~mask);
  atomicOr(word, value & mask);
}

template <typename In, bool kRow, bool kSr>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    GroupedPanelKernel(const __grid_constant__ PanelParams p) {
  using Storage = typename In::Storage;
  extern __shared__ __align__(16) uint8_t panel_smem[];
  __shared__ float enc_table[128];
  __shared__ LocateShared sh;

  const int t = threadIdx.x;
  const int lane = t % 32;
  const int warp = t / 32;
  const int panel = warp % kPanels;
  const int vector_group = warp / kPanels;
  const int64_t R = p.rs.rows;
  const int64_t N = p.cols;
  const int64_t G = p.groups;
  const int64_t unit = blockIdx.x;
  // Row i of this thread's slots: 16 bytes at mine + i * kPanelRowBytes.
  uint8_t* const mine = panel_smem + warp * kWarpBytes + lane * 16;
  // Word jw of staged row `row` of (warp w, lane v).
  auto staged = [&](int w, int v, int row, int jw) {
    return *reinterpret_cast<const uint32_t*>(
        panel_smem + w * kWarpBytes + row * kPanelRowBytes + v * 16 + 4 * jw);
  };

  for (int64_t ex = blockIdx.z; ex < p.batch; ex += gridDim.z) {
    const int32_t* sizes = p.group_sizes + ex * G;
    if (unit >= p.group_units) {  // a tail unit: its rows of no group, zeros
      const int64_t end = GroupsEnd(sizes, G, p.rs, sh.warp_sums);
      const int64_t first = end + (unit - p.group_units) * kUnitRows;
      const int64_t last = min(R, first + kUnitRows);
      for (int64_t chunk = blockIdx.y; chunk < p.chunks; chunk += gridDim.y) {
        const int64_t vector = chunk * kCtaVectors + t % kCtaVectors;
        if (vector >= p.vectors) continue;
        for (int64_t r = first + t / kCtaVectors; r < last;
             r += kThreads / kCtaVectors) {
          __stcs(p.col + (ex * R + r) * p.vectors + vector, 0u);
          if constexpr (kRow) {
            __stcs(p.row + (ex * R + r) * p.vectors + vector, 0u);
          }
        }
      }
      continue;
    }

    const RegionSpec regions{kRow, true, grouped::kNvfp4Block};
    LocateTile<kUnitRows>(sizes, G, p.rs, N, regions, unit, sh);
    if (sh.found.group < 0) continue;  // CTA-uniform
    const int64_t start = sh.found.start;
    const int64_t rows_g = sh.found.rows;
    const int64_t u0 = sh.found.tile * kUnitRows;  // first row, in the group
    const int count = static_cast<int>(min(int64_t{kUnitRows}, rows_g - u0));
    const int64_t slot = ex * G + sh.found.group;
    uint8_t* const scales =
        p.col_scale + ex * p.col_scale_bytes + sh.found.col_region;
    uint8_t* const row_scales =
        kRow ? p.row_scale + ex * p.row_scale_bytes + sh.found.row_region
             : nullptr;
    const int64_t q_cols =
        grouped::PadTo(grouped::CeilDiv(rows_g, int64_t{kB}), 4);
    // Element ex * R * N + start * N + n * rows_g + u0: T row n's first code
    // of this unit.
    const int64_t e_base = (ex * R + start) * N + u0;

    // The group's multipliers of the 128 scale bytes (/ 8 where that is
    // exact for all of them, without SR); read after the first chunk's
    // barrier.
    const Nvfp4TensorScale ts = MakeNvfp4TensorScale(p.amax[slot]);
    const bool scaled =
        !kSr && nvfp4::EighthIsExact(Nvfp4EncodeMultiplier(
                    static_cast<uint8_t>(nvfp4::kSmallestMultiplierByte), ts));
    [[maybe_unused]] uint32_t key0 = 0;  // SR: the group's key
    [[maybe_unused]] uint32_t key1 = 0;
    if constexpr (kSr) {
      key0 = p.keys[2 * slot];
      key1 = p.keys[2 * slot + 1];
    }
    if (t < 128) {
      const float enc = Nvfp4EncodeMultiplier(static_cast<uint8_t>(t), ts);
      enc_table[t] = scaled ? nvfp4::MulRn(enc, 0.125f) : enc;
    }

    // Row i of this thread's panel: row first_row + i of the batch.
    const int64_t first_row = ex * R + start + u0 + panel * kB;
    const Storage* x = static_cast<const Storage*>(p.x) + first_row * N;
    for (int64_t chunk = blockIdx.y; chunk < p.chunks; chunk += gridDim.y) {
      const int64_t vector = chunk * kCtaVectors + vector_group * 32 + lane;
      const bool column_ok = vector < p.vectors;
#pragma unroll
      for (int i = 0; i < kB; ++i) {
        const bool ok = column_ok && panel * kB + i < count;
        AsyncCopy16(mine + i * kPanelRowBytes,
                    ok ? static_cast<const void*>(x + i * N + vector * kVec)
                       : p.x,
                    ok);
      }
      AsyncCommit();
      AsyncWaitGroup<0>();  // this thread's slots are in
      __syncthreads();      // the table is in (first chunk)

      // Rowwise first: the colwise steps below stage their outputs in the
      // words they consume. N % 16 == 0: both lanes of a block are in range
      // or neither (their shuffles run in every lane).
      if constexpr (kRow) {
        const unsigned block_lanes = 3u << (lane & 30);
        // Row i of the panel: its code word at row_codes + i * vectors, its
        // block's scale byte at row_scale + 16 i (the panel's 16 rows, a
        // 16-aligned run of the unit, share their 128 x 4 swizzle tile).
        const int first_local = panel * kB;  // the panel's first row, in the unit
        uint32_t* row_codes = p.row + first_row * p.vectors + vector;
        uint8_t* row_scale =
            row_scales + grouped::SwizzleOffset(u0 + first_local, vector / 2,
                                                p.row_q_cols);
        const int rows_here = column_ok ? count - first_local : 0;
        // SR: the group's rowwise index of element (r, n) is r * N + n
        // (grouped/nvfp4_cuda.cu: SrIndex), so row i's 8 values are exactly
        // octet (u0 + first_local + i) * N / 8 + vector (N % 16 == 0).
        [[maybe_unused]] uint64_t octet =
            static_cast<uint64_t>(u0 + first_local) *
                static_cast<uint64_t>(p.vectors) +
            static_cast<uint64_t>(vector);
#pragma unroll 1
        for (int i = 0; i < kB; ++i) {
          const uint4 four =
              *reinterpret_cast<const uint4*>(mine + i * kPanelRowBytes);
          const uint32_t w[4] = {four.x, four.y, four.z, four.w};
          uint32_t sdb;
          uint32_t packed;
          if constexpr (kSr) {
            uint32_t rbytes[2];
            StochasticRoundingOctet(key0, key1, octet, kRowwiseStream,
                                    rbytes[0], rbytes[1]);
            octet += static_cast<uint64_t>(p.vectors);
            packed = nvfp4::HalfRowSrCodes<In>(w, ts.factor, enc_table,
                                               block_lanes, rbytes, sdb);
          } else {
            packed = scaled ? nvfp4::HalfRowCodes<In, true>(
                                  w, ts.factor, enc_table, block_lanes, sdb)
                            : nvfp4::HalfRowCodes<In, false>(
                                  w, ts.factor, enc_table, block_lanes, sdb);
          }
          if (i < rows_here) {
            __stcs(row_codes, packed);
            if (lane % 2 == 0) row_scale[16 * i] = static_cast<uint8_t>(sdb);
          }
          row_codes += p.vectors;
        }
      }

      // kVec / 2 steps of 2 columns: word jw of each of the 16 rows.
#pragma unroll 1
      for (int step = 0; step < kVec / 2; ++step) {
        const int jw = (step + lane / 8) % 4;
        uint32_t words[kB];
#pragma unroll
        for (int i = 0; i < kB; ++i) {
          words[i] = *reinterpret_cast<const uint32_t*>(
              mine + i * kPanelRowBytes + 4 * jw);
        }
        uint32_t* const out = reinterpret_cast<uint32_t*>(mine + 4 * jw);
#pragma unroll
        for (int sub = 0; sub < 2; ++sub) {
          uint32_t packed[kB / 2];
          nvfp4::ColumnPairs(words, sub, packed);
          uint32_t sdb;
          uint2 codes;
          if constexpr (kSr) {
            // Element (n, r) of the group's T layout (N, rows_g) has index
            // n * rows_g + r (SrIndex): the block's 16 rows are a run from
            // u0 + 16 panel (one that starts an octet where rows_g % 8 ==
            // 0, else one more call).
            const int64_t n = vector * kVec + 2 * jw + sub;
            uint32_t rbytes[kB / 4];
            nvfp4::SrRunBytes<kB>(
                key0, key1, kColwiseStream,
                static_cast<uint64_t>(static_cast<uint32_t>(n)) *
                    static_cast<uint64_t>(rows_g),
                static_cast<uint32_t>(u0 + panel * kB), rbytes);
            codes = nvfp4::HalfBlockSrCodes<In>(packed, ts.factor, enc_table,
                                                rbytes, sdb);
          } else {
            codes = scaled ? nvfp4::HalfBlockCodes<In, true>(
                                 packed, ts.factor, enc_table, sdb)
                           : nvfp4::HalfBlockCodes<In, false>(
                                 packed, ts.factor, enc_table, sdb);
          }
          out[StagedCodeRow(sub) * kRowWords] = codes.x;
          out[(StagedCodeRow(sub) + 1) * kRowWords] = codes.y;
          out[StagedScaleRow(sub) * kRowWords] = sdb;
        }
      }
      __syncthreads();  // every panel's codes and scale bytes are staged

      // Line (vector group g, column c of the vector, lane v): T row n =
      // (chunk * 64 + g * 32 + v) * 8 + c. Its code word j (codes 8j ..
      // 8j + 7) is staged by panel j / 2 (warp g * 4 + j / 2) in row
      // StagedCodeRow(c % 2) + j % 2, word c / 2 of lane v's slots. Thread t
      // serves lane v = t / 8 of every line, as its word k = t % 8: it loads
      // code word k, takes word k - 1 from its neighbour (a shuffle in the
      // 8-lane group) and stores destination word k of the segment (codes
      // 8k - d .. 8k - d + 7, d = e0 % 8 its first nibble); k = 7 also the
      // 9th word (codes 64 - d .. 63). The shuffles run in every lane.
      const int k = lane % kLanesPerSegment;
      const int line_lane = t / kLanesPerSegment;  // v
      const uint8_t* const code_words = panel_smem + (k / 2) * kWarpBytes +
                                        (StagedCodeRow(0) + k % 2) *
                                            kPanelRowBytes +
                                        line_lane * 16;
#pragma unroll 1
      for (int g = 0; g < kVectorGroups; ++g) {
        const int64_t line_vector = chunk * kCtaVectors + g * 32 + line_lane;
        const bool line_ok = line_vector < p.vectors;
        int64_t e0 = e_base + line_vector * kVec * rows_g;  // column c = 0
#pragma unroll 2
        for (int c = 0; c < kVec; ++c, e0 += rows_g) {
          const uint32_t code = *reinterpret_cast<const uint32_t*>(
              code_words + g * kPanels * kWarpBytes +
              (StagedCodeRow(c % 2) - StagedCodeRow(0)) * kPanelRowBytes +
              4 * (c / 2));
          const uint32_t up =
              __shfl_up_sync(0xFFFFFFFFu, code, 1, kLanesPerSegment);
          const uint32_t below = k == 0 ? 0u : up;
          if (!line_ok) continue;
          const int d = static_cast<int>(e0 & 7);
          uint32_t* const word = p.col + (e0 >> 3) + k;
          StoreNibbles(word, __funnelshift_l(below, code, 4 * d),
                       k == 0 ? d : 0, min(8, d + count - 8 * k));
          if (k == kLanesPerSegment - 1) {
            StoreNibbles(word + 1, __funnelshift_l(code, 0u, 4 * d), 0,
                         min(8, d + count - 64));
          }
        }
      }
      // The scale bytes: panel b of line q is block u0 / 16 + b of T row n
      // (0 for a panel past the group's rows).
      for (int q = t; q < kCtaCols; q += kThreads) {
        const int g = q / 256;
        const int c = q / 32 % kVec;
        const int v = q % 32;
        const int64_t line_vector = chunk * kCtaVectors + g * 32 + v;
        if (line_vector >= p.vectors) continue;
        const int64_t n = line_vector * kVec + c;
        uint32_t word = 0;
#pragma unroll
        for (int b = 0; b < kPanels; ++b) {
          if (b * kB < count) {
            word |= (staged(g * kPanels + b, v, StagedScaleRow(c % 2), c / 2) &
                     0xFFu)
                    << (8 * b);
          }
        }
        __stcs(reinterpret_cast<uint32_t*>(
                   scales + grouped::SwizzleOffset(n, u0 / kB, q_cols)),
               word);
      }
      __syncthreads();  // the next chunk's copies overwrite the slots
    }
    // The next example's LocateTile starts with a barrier: enc_table is free.
  }
}

template <typename In, bool kRow, bool kSr>
GroupedLaunchStatus LaunchTyped(const PanelParams& p, dim3 grid,
                                cudaStream_t stream) {
  static const cudaError_t allowed =
      cudaFuncSetAttribute(GroupedPanelKernel<In, kRow, kSr>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                           kSmemBytes);
  if (allowed != cudaSuccess) {
    cudaGetLastError();
    return Fail(allowed,
                "allowing the grouped NVFP4 PanelKernel 64 KiB of shared "
                "memory");
  }
  GroupedPanelKernel<In, kRow, kSr><<<grid, kThreads, kSmemBytes, stream>>>(
      p);
  return CheckLaunch("launching the grouped NVFP4 PanelKernel");
}

}  // namespace

bool Nvfp4PanelsApply(const GroupedNvfp4QuantizeProblem& problem,
                      const GroupedNvfp4QuantizeBuffers& buffers) {
  const GroupedView& v = problem.view;
  if (problem.rowwise &&
      (v.cols % kB != 0 || !Aligned(buffers.row, 4))) {
    return false;
  }
  if (!problem.colwise || problem.use_2d ||
      v.input_type == InputType::kF32 || v.cols % kVec != 0 ||
      v.rows * v.cols == 0 || !Aligned(buffers.x, 16) ||
      !Aligned(buffers.col, 4) || !Aligned(buffers.col_scale, 4)) {
    return false;
  }
  // Only problems whose CTAs fill one wave of resident slots, and at least
  // one whole 512-column chunk wide: a CTA covers 64 rows x 512 columns, so
  // smaller problems leave SMs idle (1024^2, 8 groups: 48 CTAs for 132 SMs)
  // and narrow ones leave lanes idle; the tile kernel's 64 x 64 tiles spread
  // them better.
  const int64_t units = grouped::WorstCaseUnits(v.rows, v.groups, kUnitRows);
  const int64_t chunks = grouped::CeilDiv(v.cols, int64_t{kCtaCols});
  return v.cols >= kCtaCols &&
         units * chunks * v.batch >= int64_t{SmCount()} * kMinBlocks;
}

GroupedLaunchStatus LaunchNvfp4Panels(
    const GroupedNvfp4QuantizeProblem& problem,
    const GroupedNvfp4QuantizeBuffers& buffers, cudaStream_t stream) {
  const GroupedView& v = problem.view;
  PanelParams p{};
  p.x = buffers.x;
  p.amax = buffers.amax;
  p.keys = buffers.keys;
  p.group_sizes = buffers.group_sizes;
  p.row = problem.rowwise ? reinterpret_cast<uint32_t*>(buffers.row) : nullptr;
  p.row_scale = problem.rowwise ? buffers.row_scale : nullptr;
  p.col = reinterpret_cast<uint32_t*>(buffers.col);
  p.col_scale = buffers.col_scale;
  p.batch = v.batch;
  p.rs = RowSpec::Make(v.rows, v.rows_per_unit);
  p.cols = v.cols;
  p.vectors = v.cols / kVec;
  p.groups = v.groups;
  p.row_scale_bytes = problem.row_scale_bytes;
  p.col_scale_bytes = problem.col_scale_bytes;
  p.row_q_cols = grouped::PadTo(grouped::CeilDiv(v.cols, int64_t{kB}), 4);
  dim3 grid;
  if (!TileGrid(v.rows, v.cols, v.groups, kUnitRows, kCtaCols, v.batch,
                &p.group_units, &p.chunks, &grid)) {
    return grouped_dev::Unsupported(
        "the tensor is too large (2^31 row tiles or more per example)");
  }
  // Two chunks per CTA where that still leaves two waves of CTAs with work:
  // a CTA's prologue (its group's lookup and encode table, ~13% of the
  // instructions with one chunk) is then paid once per two chunks (four
  // chunks per CTA leave too few CTAs).
  const int64_t paired = grouped::CeilDiv(p.chunks, int64_t{2});
  if (p.group_units * paired * v.batch >=
      int64_t{2} * SmCount() * kMinBlocks) {
    grid.y = static_cast<unsigned>(std::min<int64_t>(paired, 65535));
  }
  const bool bf16 = v.input_type == InputType::kBF16;
  auto launch = [&](auto sr) {  // std::bool_constant of stochastic rounding
    constexpr bool kSr = decltype(sr)::value;
    if (problem.rowwise) {
      return bf16 ? LaunchTyped<Bf16In, true, kSr>(p, grid, stream)
                  : LaunchTyped<F16In, true, kSr>(p, grid, stream);
    }
    return bf16 ? LaunchTyped<Bf16In, false, kSr>(p, grid, stream)
                : LaunchTyped<F16In, false, kSr>(p, grid, stream);
  };
  return problem.stochastic_rounding ? launch(std::true_type{})
                                     : launch(std::false_type{});
}

}  // namespace eqx_quant::cuda
