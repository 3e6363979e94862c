// The rowwise-only path of eqx_quant_grouped_nvfp4_quantize for 16-bit inputs
// without 2D scaling, with or without stochastic rounding (sm_90a):
// RowOctetKernel and its launcher TryNvfp4RowOctet (declared in
// grouped/device_cuda.cuh, called by GroupedNvfp4Quantize in
// grouped/nvfp4_cuda.cu). Same bytes as the generic grouped NVFP4 TileKernel
// there and the CPU kernel. Taken when x is bf16 / f16, N % 16 == 0, x is
// 16-byte aligned, the codes 4-byte and the scales 16-byte aligned, the scale
// buffer is exactly its worst-case length (common/grouped_layout.h:
// ScaleBufferBytes) and R < 2^25. Compiled with --fmad=false --ftz=false
// --prec-div=true.
//
// The grouped MXFP8 RowOctetKernel's plan (grouped/mxfp8_row_cuda.cuh)
// with the dense RowHalfKernel's data path (nvfp4/row_half_cuda.cuh):
//   * a CTA owns one row octet of a 128-row unit (aligned at its group's
//     start) over kChunkCols = 2048 columns: warp q (0..7) owns unit row
//     2 * octet + (q & 1) + 32 * (q >> 1), whose 32 scale tiles' sectors
//     (32 bytes: 4 blocks of the 8 octet rows) are the CTA's, staged in
//     shared memory and written after one barrier as 16-byte streaming
//     stores (the whole scale buffer, slack units included: no memset);
//   * a lane copies its 8 16-byte vectors of the row (8 values each; a block
//     is two adjacent lanes) into its own slots of shared memory by cp.async,
//     two commit groups of 4, then keys and encodes each 4 packed as they
//     land (HalfRowCodes: the block key as a max over 16-bit halves, the
//     codes' magnitudes in pairs on the FMA pipe; a block with a NaN takes
//     the unpacked exact path) and stores each vector's 8 codes as one 4-byte
//     streaming store (a warp store: 128 contiguous bytes);
//   * the unit's group (LocateUnit by warp 0, passed to the CTA in shared
//     memory before the loads) gives the tensor scale: the encode
//     multipliers of the 128 scale bytes are a shared table filled while the
//     loads are in flight.
// 8 vectors per lane by cp.async keep more bytes in flight than 4 held in
// registers; the group lookup by one warp and column tests in 32 bits keep
// the instruction count down.
// Stochastic rounding: the group's rowwise SR index of element (i, n) is
// i * N + n, so a lane's vector is one whole octet of indices and one
// Threefry call gives its 8 random bytes (EncodeSrBatch, RowHalfSrKernel's
// plan); 4 CTAs per SM.

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/grouped_layout.h"
#include "common/grouped_problem.h"
#include "common/nvfp4_format.h"
#include "cuda/cp_async.cuh"
#include "cuda/fp8_convert.cuh"
#include "grouped/device_cuda.cuh"
#include "grouped/quantize_cuda.h"
#include "grouped/row_octet_cuda.cuh"
#include "nvfp4/device_cuda.cuh"
#include "nvfp4/half_codes_cuda.cuh"
#include "nvfp4/math_cuda.cuh"

namespace eqx_quant::cuda {
namespace {

using grouped_dev::Aligned;
using grouped_dev::CheckLaunch;
using grouped_dev::kThreads;
using grouped_dev::LocateUnit;
using grouped_dev::UnitGroup;
using grouped_row::kSectorBytes;
using grouped_row::kTileBytes;
using grouped_row::kUnitRows;
using grouped_row::MakeRowOctetLaunch;
using grouped_row::OctetItem;
using grouped_row::OctetItemOf;
using grouped_row::OctetSectors;
using grouped_row::RowParams;
using grouped_row::SectorByte;
using nvfp4::Bf16In;
using nvfp4::F16In;

constexpr int kVec = 8;                 // 16-bit values per 16-byte vector
constexpr int kBatch = 4;               // vectors per lane encoded together
constexpr int kBatches = 2;             // batches per lane
constexpr int kLoads = kBatch * kBatches;       // vectors per lane
constexpr int kChunkCols = kLoads * 32 * kVec;  // 2048
constexpr int kTileCols = 4 * nvfp4::kB;  // columns of one scale tile: 64
constexpr int kChunkTiles = kChunkCols / kTileCols;  // 32
// Resident CTAs per SM: 5 at most 48 registers, 34 KiB of shared memory (6,
// at 40 registers, would spill). With stochastic rounding 4 (64 registers,
// no spills: a batch's 4 Threefry states beside its vectors), slightly
// faster than 3.
template <bool kSr>
constexpr int kMinBlocks = kSr ? 4 : 5;

// Stores vector u's code word (its row exists, row_ok, and it starts below
// N: u * 256 < cols_left) and puts its block's scale byte into sectors
// (even lanes; 0 for padding rows and blocks) at block first_block + (u * 32
// + lane) / 2 of the chunk.
__device__ __forceinline__ void StoreVector(int u, uint32_t word, uint32_t sdb,
                                            bool row_ok, int cols_left, int q,
                                            int first_block, uint32_t* out,
                                            uint8_t (*sectors)[kSectorBytes]) {
  const int lane = threadIdx.x % 32;
  // N % 16 == 0: both lanes of a block are in range or neither.
  const bool ok = row_ok && u * 32 * kVec < cols_left;
  if (ok) __stcs(out + u * 32, word);
  if (lane % 2 == 0) {
    const int block = first_block + (u * 32 + lane) / 2;  // in the chunk
    sectors[block / 4][SectorByte(q, block)] =
        ok ? static_cast<uint8_t>(sdb) : uint8_t{0};
  }
}

// The codes of a lane's batch of vectors u < kBatch (4-byte words at out +
// u * 32 words; cols_left - u * 256 columns of the row from the vector's
// first on) and their scale bytes into sectors (blocks from first_block in
// the chunk); a vector is encoded if its row exists (row_ok) and it starts
// below N.
template <typename In, bool kScaled>
__device__ __forceinline__ void EncodeBatch(const uint4 (&raw)[kBatch],
                                            const float* enc_table,
                                            float factor, bool row_ok,
                                            int cols_left, int q,
                                            int first_block, uint32_t* out,
                                            uint8_t (*sectors)[kSectorBytes]) {
  const int lane = threadIdx.x % 32;
  const unsigned block_lanes = 3u << (lane & 30);
#pragma unroll
  for (int u = 0; u < kBatch; ++u) {
    const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
    uint32_t sdb;
    const uint32_t word =
        nvfp4::HalfRowCodes<In, kScaled>(w, factor, enc_table, block_lanes, sdb);
    StoreVector(u, word, sdb, row_ok, cols_left, q, first_block, out, sectors);
  }
}

// EncodeBatch with stochastic rounding (RowHalfSrStep's plan,
// nvfp4/row_half_sr_cuda.cuh). The group's rowwise SR index of element (i,
// n) is i * N + n (grouped/nvfp4_cuda.cu: SrIndex); with N % 16 == 0 and
// the vector starting at a multiple of 8 its 8 values are exactly octet
// `octet + u * 32` of them, so one Threefry call gives their random bytes in
// order. The batch's 4 calls come first, in one basic block (independent
// chains that the scheduler interleaves). A batch with a NaN anywhere in the
// warp (one row: a block is two adjacent lanes) takes the NaN-ignoring key
// over both lanes and the NaN-aware encoder for every vector.
template <typename In>
__device__ __forceinline__ void EncodeSrBatch(
    const uint4 (&raw)[kBatch], const float* enc_table, float factor,
    uint32_t key0, uint32_t key1, uint64_t octet, bool row_ok, int cols_left,
    int q, int first_block, uint32_t* out, uint8_t (*sectors)[kSectorBytes]) {
  uint32_t key[kBatch];  // bits of the blocks' max |x| (NaN: a NaN)
  bool has_nan[kBatch];
  const bool warp_nan =
      __any_sync(0xFFFFFFFFu, nvfp4::HalfPairKeys<In>(raw, key, has_nan));
  uint32_t rbytes[kBatch][2];
#pragma unroll
  for (int u = 0; u < kBatch; ++u) {
    StochasticRoundingOctet(key0, key1, octet + u * 32, kRowwiseStream,
                            rbytes[u][0], rbytes[u][1]);
  }
#pragma unroll
  for (int u = 0; u < kBatch; ++u) {
    const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
    float v[8];
    nvfp4::Unpack<In, 8>(w, v);
    uint32_t word;
    uint32_t sdb;
    if (warp_nan) {  // drop the NaNs from the keys that hold one
      uint32_t clean = nvfp4::NanFreeKey<8>(v);
      clean = max(clean, __shfl_xor_sync(0xFFFFFFFFu, clean, 1));
      sdb = nvfp4::E4M3Byte(
          nvfp4::MulRn(__uint_as_float(has_nan[u] ? clean : key[u]), factor));
      uint32_t codes[2];
      nvfp4::EncodeSrBytes<8>(v, enc_table[sdb & 127u], rbytes[u], has_nan[u],
                              codes);
      word = nvfp4::PackNibbles8(codes[0], codes[1]);
    } else {
      sdb = nvfp4::E4M3Byte(nvfp4::MulRn(__uint_as_float(key[u]), factor));
      word = nvfp4::EncodeSrWord8(v, enc_table[sdb & 127u], rbytes[u], w);
    }
    StoreVector(u, word, sdb, row_ok, cols_left, q, first_block, out, sectors);
  }
}

template <typename In, bool kSr>
__global__ void __launch_bounds__(kThreads, kMinBlocks<kSr>)
    RowOctetKernel(const __grid_constant__ RowParams p) {
  __shared__ __align__(16) uint8_t sectors[kChunkTiles][kSectorBytes];
  __shared__ float enc_table[128];
  __shared__ uint4 staged[kLoads][kThreads];  // this lane's vectors: [u][t]
  __shared__ UnitGroup unit_group;

  const int lane = threadIdx.x % 32;
  const int q = threadIdx.x / 32;  // the warp's row of the octet
  const int64_t N = p.cols;
  const int64_t R = p.rs.rows;
  const int64_t ex = blockIdx.y;
  const OctetItem it = OctetItemOf(blockIdx.x, p.chunks);
  const uint32_t chunk = it.chunk;
  const uint32_t unit = it.unit;
  const int local_row = it.local_row;
  const int64_t col0 = int64_t{chunk} * kChunkCols + lane * kVec;
  // Element ex * R * N + row * N + col0 is nibble 0 of a 4-byte word.
  uint32_t* const row_words = reinterpret_cast<uint32_t*>(p.row) +
                              (ex * R * N + col0) / kVec;
  uint8_t* const scales = OctetSectors(p, ex, it);
  const uint32_t tile0 = chunk * kChunkTiles;  // first column tile
  // Sector t, half h on thread 2t + h (tiles past the row's last: none).
  const int store_tile = threadIdx.x / 2;
  const bool stores_sector =
      store_tile < kChunkTiles && tile0 + store_tile < p.tiles_per_row;
  // (Computed where used: registers are short.)
  auto sector_dst = [&] {
    return scales + int64_t{tile0 + store_tile} * kTileBytes +
           16 * (threadIdx.x % 2);
  };

  // The unit's group, found by warp 0 for the whole CTA (every warp's own
  // lookup would be a fifth of the kernel's instructions).
  if (q == 0) {
    const UnitGroup found =
        LocateUnit(p.group_sizes + ex * p.groups, p.groups, p.rs, unit);
    if (lane == 0) unit_group = found;
  }
  __syncthreads();
  const UnitGroup where = unit_group;
  // Columns of the row from this lane's first vector on, at most a chunk's
  // (<= 0 past N).
  const int cols_left = static_cast<int>(min(N - col0, int64_t{kChunkCols}));

  if (where.found) {  // CTA-uniform
    const int64_t local0 = int64_t{unit - where.first} * kUnitRows;
    const bool row_ok = local0 + local_row < where.count;
    const int64_t row = where.start + local0 + local_row;
    const uint16_t* x = static_cast<const uint16_t*>(p.x) + (ex * R + row) * N +
                        col0;
    // The lane's vectors into its own slots of `staged` (no barrier), a
    // commit group per batch; zeros past the row's end or the group.
#pragma unroll
    for (int b = 0; b < kBatches; ++b) {
#pragma unroll
      for (int u = b * kBatch; u < (b + 1) * kBatch; ++u) {
        const bool ok = row_ok && u * 32 * kVec < cols_left;
        AsyncCopy16(&staged[u][threadIdx.x], ok ? x + u * 32 * kVec : p.x, ok);
      }
      AsyncCommit();
    }
    // The group's tensor scale and the multipliers of its 128 scale bytes
    // (/ 8 where that is exact for all of them, without SR), while the loads
    // fly.
    const int64_t slot = ex * p.groups + where.group;
    const Nvfp4TensorScale ts = MakeNvfp4TensorScale(p.amax[slot]);
    const bool scaled =
        !kSr && nvfp4::EighthIsExact(Nvfp4EncodeMultiplier(
                    static_cast<uint8_t>(nvfp4::kSmallestMultiplierByte), ts));
    if (threadIdx.x < 128) {
      const float enc =
          Nvfp4EncodeMultiplier(static_cast<uint8_t>(threadIdx.x), ts);
      enc_table[threadIdx.x] = scaled ? nvfp4::MulRn(enc, 0.125f) : enc;
    }
    __syncthreads();  // the table is in
    uint32_t* const out = row_words + row * N / kVec;
    auto encode = [&](auto scaled_tag) {  // std::bool_constant of `scaled`
      // SR: the group's key and the octet of the lane's first vector (its
      // row's index in the group times N / 8, plus col0 / 8).
      [[maybe_unused]] uint32_t key0 = 0;
      [[maybe_unused]] uint32_t key1 = 0;
      [[maybe_unused]] uint64_t octet = 0;
      if constexpr (kSr) {
        key0 = p.keys[2 * slot];
        key1 = p.keys[2 * slot + 1];
        octet = static_cast<uint64_t>(local0 + local_row) *
                    static_cast<uint64_t>(N / kVec) +
                static_cast<uint64_t>(col0 / kVec);
      }
#pragma unroll
      for (int b = 0; b < kBatches; ++b) {
        if (b == 0) {
          AsyncWaitGroup<kBatches - 1>();
        } else {
          AsyncWaitGroup<0>();
        }
        uint4 raw[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          raw[u] = staged[b * kBatch + u][threadIdx.x];
        }
        if constexpr (kSr) {
          EncodeSrBatch<In>(raw, enc_table, ts.factor, key0, key1,
                            octet + b * kBatch * 32, row_ok,
                            cols_left - b * kBatch * 32 * kVec, q,
                            b * kBatch * 16, out + b * kBatch * 32, sectors);
        } else {
          EncodeBatch<In, decltype(scaled_tag)::value>(
              raw, enc_table, ts.factor, row_ok,
              cols_left - b * kBatch * 32 * kVec, q, b * kBatch * 16,
              out + b * kBatch * 32, sectors);
        }
      }
    };
    if (scaled) {
      encode(std::true_type{});
    } else {
      encode(std::false_type{});
    }
    __syncthreads();  // the sectors are in
    if (stores_sector) {
      StoreStreaming16(sector_dst(), *reinterpret_cast<const uint4*>(
                                       &sectors[store_tile][16 * (threadIdx.x % 2)]));
    }
  } else if (unit < p.worst_units && stores_sector) {  // the buffer's slack
    StoreStreaming16(sector_dst(), make_uint4(0, 0, 0, 0));
  }

  // Tail unit `unit`: this octet's rows of no group, zeroed.
  const int64_t tail_row = where.end + int64_t{unit} * kUnitRows + local_row;
  if (tail_row < R) {
    uint32_t* const out = row_words + tail_row * N / kVec;
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      if (u * 32 * kVec < cols_left) __stcs(out + u * 32, 0u);
    }
  }
}

}  // namespace

GroupedLaunchStatus TryNvfp4RowOctet(
    const GroupedNvfp4QuantizeProblem& problem,
    const GroupedNvfp4QuantizeBuffers& buffers, cudaStream_t stream,
    bool* taken) {
  const GroupedView& v = problem.view;
  *taken = false;
  if (!problem.rowwise || problem.colwise || problem.use_2d ||
      v.input_type == InputType::kF32 ||
      v.cols % nvfp4::kB != 0 || v.batch > 65535 ||
      v.rows >= (int64_t{1} << 25) || !Aligned(buffers.x, 16) ||
      !Aligned(buffers.row, 4) || !Aligned(buffers.row_scale, 16)) {
    return GroupedLaunchStatus{};
  }
  RowParams p;
  dim3 grid;
  if (!MakeRowOctetLaunch(problem, buffers, kChunkCols, grouped::kNvfp4Block,
                          &p, &grid)) {
    return GroupedLaunchStatus{};
  }
  *taken = true;
  p.amax = buffers.amax;
  p.keys = buffers.keys;
  const bool bf16 = v.input_type == InputType::kBF16;
  if (problem.stochastic_rounding) {
    if (bf16) {
      RowOctetKernel<Bf16In, true><<<grid, kThreads, 0, stream>>>(p);
    } else {
      RowOctetKernel<F16In, true><<<grid, kThreads, 0, stream>>>(p);
    }
  } else if (bf16) {
    RowOctetKernel<Bf16In, false><<<grid, kThreads, 0, stream>>>(p);
  } else {
    RowOctetKernel<F16In, false><<<grid, kThreads, 0, stream>>>(p);
  }
  return CheckLaunch("launching the grouped NVFP4 RowOctetKernel");
}

}  // namespace eqx_quant::cuda
