// CUDA kernels of eqx_quant_fp8_quantize for sm_90a (H100 / H200).
//
// Semantics: exactly the CPU kernel's (kernels/fp8_quantize_cpu.h), bit for
// bit. Per example b: y = float(x) * scale[b] (one IEEE f32 multiply,
// __fmul_rn; this file is compiled without fast-math, FTZ or FMA
// contraction), a saturating round-to-nearest-even cast to e4m3fn / e5m2 with
// NaN -> 0x7F, scale_inv[b] = 1 / scale[b] (IEEE, NaN canonical), amax[b] =
// max |x| ignoring NaN (subnormals kept), dbias = canonical tree sums, one per
// node of the split axis' tree (NaN canonical).
//
// The FP8 cast is the hardware convert `cvt.rn.satfinite.{e4m3,e5m2}x2.f32`
// (two values per instruction, SASS F2FP.SATFINITE). Its results equal
// fp8_format.h's FloatToFp8 for every f32 input, NaN -> 0x7F of either sign
// and the sign of zero included; the exported EqxQuantCudaFp8ConvertSelfTest
// checks that on all 2^32 f32 bit patterns (tests/test_cuda.py runs it).
//
// Launch sequence (all on the caller's stream, nothing allocated, every launch
// checked):
//   1. InitKernel: scale_inv[b] = 1/scale[b], amax[b] = 0. It lets its
//      dependents launch at once.
//   2. One main kernel, launched with programmatic dependent launch so that
//      it overlaps (1); a block waits for (1) (griddepcontrol.wait) only right
//      before its single amax atomicMax. EQX_QUANT_CUDA_PDL=0 turns this off.
//        * CastRowwiseKernel when only the rowwise cast is wanted: a flat,
//          vectorised stream over each example: 16-byte loads (kCastUnroll
//          in flight per thread), 8-byte (bf16/f16) or 4-byte (f32) stores,
//          block max + one atomicMax per block; 256 threads, 32 registers,
//          one full wave of 8 blocks per SM and a grid-stride loop.
//        * WalkKernel otherwise (transposed output and/or dbias): a block of
//          64 threads owns a tile of 64 x kVec columns (16 input bytes per
//          thread) and walks a range of rows in increasing order, kChunkRows
//          rows at a time, 8 rows of loads in flight per thread. Per row it
//          writes the rowwise bytes straight to global memory and the same
//          bytes into a shared-memory staging tile (XOR-swizzled against bank
//          conflicts); after each chunk the tile is written out transposed, a
//          4x4 byte transpose in registers and 16-byte stores (whole
//          kChunkRows-byte runs of 16 output rows per warp instruction).
//          Without dbias the row ranges are 32-128 rows (96 registers, 10
//          blocks per SM). With dbias a range is one dbias node (or one of
//          2^s subtrees of it, when there are too few nodes x column tiles to
//          fill the GPU: a cluster of 2^s blocks, rank 0 merging the subtree
//          sums through distributed shared memory), and each thread adds its
//          columns in exact canonical tree order with a DbiasStack
//          (kernels/fp8_quantize_cuda.h: the top and 2 levels in registers,
//          deeper levels in shared memory; the merges of each row come from a
//          per-chunk table) (128 registers, 8 blocks per SM).
// No kernel spills (ptxas -warn-spills is on in CMake).

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"
#include "kernels/fp8_quantize_cuda.h"

namespace eqx_quant::cuda {
namespace {

namespace cg = cooperative_groups;
namespace walk = dbias_walk;

// ---------------------------------------------------------------------------
// Tuning constants.

// CastRowwiseKernel.
constexpr int kCastThreads = 256;
constexpr int kCastUnroll = 4;  // 16-byte loads in flight per thread
constexpr int kCastBlocksPerSm = 8;  // resident per SM: 32 registers, full occupancy

// WalkKernel.
constexpr int kWalkThreads = 64;
constexpr int kChunkRows = 32;        // rows staged per transposed write-out
constexpr int kRowBlocks = kChunkRows / 16;  // 16-row blocks in a chunk
constexpr int kWalkBlocksPerSm = 16;  // at most, for the grid size aimed at
constexpr int kMaxClusterLevels = 3;  // up to 8 blocks per dbias node
static_assert(kChunkRows % 16 == 0 && 32 % kRowBlocks == 0, "chunk shape");
static_assert(kChunkRows <= 64, "merges table is one byte per chunk row");

// ---------------------------------------------------------------------------
// Element types.

struct F32Input {
  using Storage = float;
  static constexpr int kVec = 4;  // elements per 16-byte load
  static __device__ __forceinline__ float Scalar(const float* p) {
    return *p;
  }
  static __device__ __forceinline__ void Unpack(const uint4& raw,
                                                float (&v)[kVec]) {
    v[0] = __uint_as_float(raw.x);
    v[1] = __uint_as_float(raw.y);
    v[2] = __uint_as_float(raw.z);
    v[3] = __uint_as_float(raw.w);
  }
};

__device__ __forceinline__ float HalfBitsToFloat(uint16_t bits) {
  // cvt.f32.f16 is exact, subnormals included.
  float value;
  asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(bits));
  return value;
}

struct F16Input {
  using Storage = uint16_t;
  static constexpr int kVec = 8;
  static __device__ __forceinline__ float Scalar(const uint16_t* p) {
    return HalfBitsToFloat(*p);
  }
  static __device__ __forceinline__ void Unpack(const uint4& raw,
                                                float (&v)[kVec]) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = HalfBitsToFloat(static_cast<uint16_t>(words[i] & 0xFFFFu));
      v[2 * i + 1] = HalfBitsToFloat(static_cast<uint16_t>(words[i] >> 16));
    }
  }
};

struct Bf16Input {
  using Storage = uint16_t;
  static constexpr int kVec = 8;
  static __device__ __forceinline__ float Scalar(const uint16_t* p) {
    return __uint_as_float(static_cast<uint32_t>(*p) << 16);
  }
  static __device__ __forceinline__ void Unpack(const uint4& raw,
                                                float (&v)[kVec]) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(words[i] << 16);
      v[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
    }
  }
};

// ---------------------------------------------------------------------------
// Device helpers.

// Two f32 -> two FP8 bytes (lo in the low byte), saturating RNE, NaN -> 0x7F.
template <Fp8Format kFormat>
__device__ __forceinline__ uint32_t CvtPair(float lo, float hi) {
  uint16_t packed;
  if constexpr (kFormat == Fp8Format::kE4M3Fn) {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
        : "=h"(packed)
        : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;"
        : "=h"(packed)
        : "f"(hi), "f"(lo));
  }
  return packed;
}

// kVec values times `scale` -> kVec FP8 bytes, little-endian in kVec/4 words.
template <Fp8Format kFormat, int kVec>
__device__ __forceinline__ void CastVec(const float (&v)[kVec], float scale,
                                        uint32_t (&out)[kVec / 4]) {
#pragma unroll
  for (int i = 0; i < kVec / 4; ++i) {
    const uint32_t lo = CvtPair<kFormat>(__fmul_rn(v[4 * i], scale),
                                         __fmul_rn(v[4 * i + 1], scale));
    const uint32_t hi = CvtPair<kFormat>(__fmul_rn(v[4 * i + 2], scale),
                                         __fmul_rn(v[4 * i + 3], scale));
    out[i] = lo | (hi << 16);
  }
}

template <Fp8Format kFormat>
__device__ __forceinline__ uint8_t CastOne(float v, float scale) {
  return static_cast<uint8_t>(CvtPair<kFormat>(__fmul_rn(v, scale), 0.0f));
}

// A streaming 16-byte load of read-only data (not kept in L1).
__device__ __forceinline__ uint4 LoadStreaming(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

// The kVec elements at p[0..valid) packed like a 16-byte load, zero-filled
// (for rows that are not 16-byte aligned or the last partial vector).
template <typename In>
__device__ __forceinline__ uint4 LoadPacked(const typename In::Storage* p,
                                            int valid) {
  uint32_t words[4] = {0u, 0u, 0u, 0u};
  if constexpr (sizeof(typename In::Storage) == 4) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (e < valid) words[e] = __float_as_uint(p[e]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if (e < valid) {
        words[e / 2] |= static_cast<uint32_t>(p[e]) << (16 * (e % 2));
      }
    }
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// Programmatic dependent launch (sm_90). Without the launch attribute both
// are no-ops.
__device__ __forceinline__ void WaitForPrerequisiteGrids() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void AllowDependentGrids() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// max over the block of non-negative, non-NaN floats; the result is valid in
// thread 0. `scratch` holds one float per warp.
template <int kThreads>
__device__ __forceinline__ float BlockMax(float value, float* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xFFFFFFFFu, value, offset));
  }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) scratch[warp] = value;
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll
    for (int w = 1; w < kThreads / 32; ++w) value = fmaxf(value, scratch[w]);
  }
  return value;
}

// amax[b] = max(amax[b], value) for non-negative floats: their bit patterns
// order like the values. Waits for InitKernel's zeroing first.
__device__ __forceinline__ void PublishAmax(float* amax, float value) {
  if (value > 0.0f) {
    WaitForPrerequisiteGrids();
    atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(value));
  }
}

__device__ __forceinline__ float CanonicalNan(float value) {
  return value != value ? __uint_as_float(0x7FC00000u) : value;
}

// ---------------------------------------------------------------------------
// 1. scale_inv and the amax zeroing.

__global__ void InitKernel(const float* __restrict__ scale,
                           float* __restrict__ scale_inv,
                           float* __restrict__ amax, int64_t batch) {
  AllowDependentGrids();
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       b < batch; b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    scale_inv[b] = CanonicalNan(__frcp_rn(scale[b]));
    amax[b] = 0.0f;
  }
}

// ---------------------------------------------------------------------------
// 2a. Rowwise cast + amax.

struct CastParams {
  const void* x;
  const float* scale;
  uint8_t* row;
  float* amax;
  int64_t batch;
  int64_t elements;  // per example
  bool aligned;      // x and row 16-byte aligned
};

template <typename In, Fp8Format kFormat>
__global__ void __launch_bounds__(kCastThreads, kCastBlocksPerSm)
    CastRowwiseKernel(const __grid_constant__ CastParams p) {
  using Storage = typename In::Storage;
  constexpr int kVec = In::kVec;
  constexpr int64_t kBlockVectors = int64_t{kCastThreads} * kCastUnroll;
  __shared__ float warp_max[kCastThreads / 32];
  const int tid = threadIdx.x;
  const int64_t count = p.elements;

  for (int64_t b = blockIdx.y; b < p.batch; b += gridDim.y) {
    const float scale = p.scale[b];
    const Storage* x = static_cast<const Storage*>(p.x) + b * count;
    uint8_t* out = p.row + b * count;
    // Elements before the first 16-byte boundary, and after the last.
    int64_t head = p.aligned ? (kVec - (b * count) % kVec) % kVec : count;
    head = head < count ? head : count;
    const int64_t vectors = (count - head) / kVec;
    const int64_t tail = head + vectors * kVec;
    float amax = 0.0f;

    const int64_t scalars = head + (count - tail);
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kCastThreads + tid;
         i < scalars; i += static_cast<int64_t>(gridDim.x) * kCastThreads) {
      const int64_t e = i < head ? i : tail + (i - head);
      const float v = In::Scalar(x + e);
      amax = fmaxf(amax, fabsf(v));
      out[e] = CastOne<kFormat>(v, scale);
    }

    const Storage* xv = x + head;
    uint8_t* ov = out + head;
    for (int64_t base = static_cast<int64_t>(blockIdx.x) * kBlockVectors;
         base < vectors; base += static_cast<int64_t>(gridDim.x) * kBlockVectors) {
      uint4 raw[kCastUnroll];
#pragma unroll
      for (int u = 0; u < kCastUnroll; ++u) {
        const int64_t i = base + u * kCastThreads + tid;
        if (i < vectors) raw[u] = LoadStreaming(xv + i * kVec);
      }
#pragma unroll
      for (int u = 0; u < kCastUnroll; ++u) {
        const int64_t i = base + u * kCastThreads + tid;
        if (i < vectors) {
          float v[kVec];
          In::Unpack(raw[u], v);
#pragma unroll
          for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, fabsf(v[e]));
          uint32_t q[kVec / 4];
          CastVec<kFormat>(v, scale, q);
          if constexpr (kVec == 8) {
            *reinterpret_cast<uint2*>(ov + i * kVec) = make_uint2(q[0], q[1]);
          } else {
            *reinterpret_cast<uint32_t*>(ov + i * kVec) = q[0];
          }
        }
      }
    }

    amax = BlockMax<kCastThreads>(amax, warp_max);
    if (tid == 0) PublishAmax(p.amax + b, amax);
    __syncthreads();  // warp_max is reused by the next example
  }
}

// ---------------------------------------------------------------------------
// 2b. The walk: transposed output and/or dbias (and the rowwise output).

struct WalkParams {
  const void* x;
  const float* scale;
  uint8_t* row;  // null if not rowwise
  uint8_t* col;  // null if not colwise
  float* amax;
  float* dbias;  // null if not with_dbias
  int64_t batch;
  int64_t rows;
  int64_t cols;
  int64_t col_tiles;      // ceil(cols / tile columns)
  int64_t nodes;          // row ranges per example
  int64_t rows_per_node;  // without dbias: rows of every range but the last
  // With dbias: node = kept * split + p.
  int64_t split;
  int64_t reduced_rows;  // rows per kept index = prod(reduced dims)
  walk::NestedAxes axes;
  int cluster_levels;       // 2^cluster_levels blocks per node
  int64_t merge_offset;     // dynamic shared memory layout, bytes
  int64_t staging_offset;
  bool vector_ok;      // 16-byte loads and kVec-byte row stores
  bool col_vector_ok;  // 16-byte transposed stores for whole chunks
};

// Word index in the staging tile of (chunk row, 4-byte word). The XOR spreads
// the 16-row blocks of one column word over distinct banks.
template <int kTileWords>
__device__ __forceinline__ int StagingWord(int row, int word) {
  constexpr int kSwizzleStep = 32 / kRowBlocks;
  return row * kTileWords + (word ^ (((row >> 4) % kRowBlocks) * kSwizzleStep));
}

// Writes the staged chunk (rows [chunk_row, chunk_row + h) of the example,
// tile columns [n0, n0 + width)) to col[j][i] = staged[i][j].
template <int kTileCols>
__device__ __forceinline__ void WriteTransposedChunk(
    const uint8_t* staging, int h, int64_t chunk_row, uint8_t* col,
    int64_t n0, int64_t width, int64_t rows, bool vector_ok) {
  constexpr int kTileWords = kTileCols / 4;
  const uint32_t* staged = reinterpret_cast<const uint32_t*>(staging);
  if (vector_ok && h == kChunkRows) {
    // Unit = 4 columns x 16 rows: 16 word loads, a 4x4 byte transpose per 4
    // rows, 4 16-byte stores. Lanes of a warp cover kRowBlocks row blocks of
    // 32 / kRowBlocks consecutive column groups: each store instruction
    // writes whole kChunkRows-byte runs of 32 / kRowBlocks output rows.
    constexpr int kUnits = kTileWords * kRowBlocks;
    for (int unit = threadIdx.x; unit < kUnits; unit += kWalkThreads) {
      const int block = unit % kRowBlocks;
      const int group = unit / kRowBlocks;
      if (4 * group >= width) continue;
      uint32_t w[16];
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        w[k] = staged[StagingWord<kTileWords>(block * 16 + k, group)];
      }
      uint32_t out[4][4];  // [column][4-row word]
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t a = w[4 * k];
        const uint32_t b = w[4 * k + 1];
        const uint32_t c = w[4 * k + 2];
        const uint32_t d = w[4 * k + 3];
        const uint32_t ab_lo = __byte_perm(a, b, 0x5140);  // a0 b0 a1 b1
        const uint32_t ab_hi = __byte_perm(a, b, 0x7362);  // a2 b2 a3 b3
        const uint32_t cd_lo = __byte_perm(c, d, 0x5140);
        const uint32_t cd_hi = __byte_perm(c, d, 0x7362);
        out[0][k] = __byte_perm(ab_lo, cd_lo, 0x5410);  // a0 b0 c0 d0
        out[1][k] = __byte_perm(ab_lo, cd_lo, 0x7632);  // a1 b1 c1 d1
        out[2][k] = __byte_perm(ab_hi, cd_hi, 0x5410);
        out[3][k] = __byte_perm(ab_hi, cd_hi, 0x7632);
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t j = 4 * group + q;
        if (j < width) {
          *reinterpret_cast<uint4*>(col + (n0 + j) * rows + chunk_row +
                                    block * 16) =
              make_uint4(out[q][0], out[q][1], out[q][2], out[q][3]);
        }
      }
    }
  } else {
    // Partial or unaligned chunk: bytes, consecutive lanes along a row of col.
    const uint8_t* bytes = staging;
    const int64_t total = width * h;
    for (int64_t idx = threadIdx.x; idx < total; idx += kWalkThreads) {
      const int j = static_cast<int>(idx / h);
      const int i = static_cast<int>(idx % h);
      const int word = StagingWord<kTileWords>(i, j / 4);
      col[(n0 + j) * rows + chunk_row + i] = bytes[word * 4 + j % 4];
    }
  }
}

// Stack levels of a DbiasStack kept in registers (the rest live in shared
// memory): 2 x kVec floats; the top of the stack, where most pushes and
// merges happen, is always in registers. More register levels cost more
// registers than they save in shared-memory traffic (ptxas: 2 levels and 8
// rows in flight fit 128 registers without spills; 4 levels do not).
constexpr int kRegLevels = 2;

// Rows loaded ahead per thread, and the occupancy the register budget is set
// for: 10 blocks (96 registers) without dbias, 8 (128 registers) with it;
// either way >= 64 KB of loads in flight per SM.
template <bool kDbias>
struct WalkShape {
  static constexpr int kUnroll = 8;
  static constexpr int kMinBlocks = kDbias ? 8 : 10;
};

template <typename In, Fp8Format kFormat, bool kCol, bool kDbias, int kUnroll>
__global__ void __launch_bounds__(kWalkThreads, WalkShape<kDbias>::kMinBlocks)
    WalkKernel(const __grid_constant__ WalkParams p) {
  using Storage = typename In::Storage;
  constexpr int kVec = In::kVec;
  constexpr int kTileCols = kWalkThreads * kVec;
  constexpr int kTileWords = kTileCols / 4;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float warp_max[kWalkThreads / 32];
  __shared__ uint8_t merges[kChunkRows];

  const int tid = threadIdx.x;
  int64_t bid = blockIdx.x;
  const unsigned group =
      static_cast<unsigned>(bid & ((int64_t{1} << p.cluster_levels) - 1));
  bid >>= p.cluster_levels;
  const int64_t tile = bid % p.col_tiles;
  bid /= p.col_tiles;
  const int64_t node = bid % p.nodes;
  const int64_t b = bid / p.nodes;

  // This block's rows: [first_row, first_row + row_count) of example b.
  int64_t first_row = 0;
  int64_t row_count = 0;
  int64_t kept = 0;
  int64_t part = 0;
  walk::Subtree root;
  walk::Subtree tree;
  if constexpr (kDbias) {
    kept = node / p.split;
    part = node % p.split;
    int64_t first_index = 0;
    root = walk::NodeRoot(p.axes, part, p.split, &first_index);
    tree = walk::DescendSubtree(p.axes, root, group, p.cluster_levels);
    first_row = kept * p.reduced_rows + first_index * p.axes.strides[0] +
                tree.first_row;
    row_count = tree.rows;
  } else {
    first_row = node * p.rows_per_node;
    row_count = min(p.rows_per_node, p.rows - first_row);
  }

  const int64_t cols = p.cols;
  const int64_t elements = p.rows * cols;
  const int64_t n0 = tile * kTileCols;
  const int64_t col0 = n0 + static_cast<int64_t>(tid) * kVec;
  const bool active = col0 < cols;
  const bool vector_lane = p.vector_ok && col0 + kVec <= cols;
  const float scale = p.scale[b];
  const Storage* x = static_cast<const Storage*>(p.x) + b * elements;
  uint8_t* row_out = p.row != nullptr ? p.row + b * elements : nullptr;
  uint8_t* staging = smem + p.staging_offset;

  float amax = 0.0f;
  walk::DbiasStack<kVec, kRegLevels> stack;
  stack.overflow = reinterpret_cast<float*>(smem) + tid;
  stack.overflow_stride = kWalkThreads;

  const int64_t end_row = first_row + row_count;
  for (int64_t chunk_row = first_row; chunk_row < end_row;) {
    // Chunks are aligned to multiples of kChunkRows of the example's rows.
    const int64_t chunk_end =
        min(end_row, (chunk_row / kChunkRows + 1) * kChunkRows);
    const int h = static_cast<int>(chunk_end - chunk_row);
    __syncthreads();  // the previous chunk's staging and merges are consumed
    if constexpr (kDbias) {
      if (tid < h) {
        merges[tid] = static_cast<uint8_t>(
            walk::LeafMerges(p.axes, tree, chunk_row - first_row + tid));
      }
      __syncthreads();
    }
    const Storage* xr = x + chunk_row * cols + col0;
    for (int i0 = 0; i0 < h; i0 += kUnroll) {
      uint4 raw[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (i0 + u < h) {
          const Storage* src = xr + static_cast<int64_t>(i0 + u) * cols;
          if (vector_lane) {
            raw[u] = LoadStreaming(src);
          } else {
            const int64_t left = active ? cols - col0 : 0;
            raw[u] = LoadPacked<In>(src, static_cast<int>(left < kVec ? left : kVec));
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + u;
        if (i < h) {
          float v[kVec];
          In::Unpack(raw[u], v);
#pragma unroll
          for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, fabsf(v[e]));
          uint32_t q[kVec / 4];
          CastVec<kFormat>(v, scale, q);
          if (row_out != nullptr && active) {
            uint8_t* dst = row_out + (chunk_row + i) * cols + col0;
            if (vector_lane) {
              if constexpr (kVec == 8) {
                *reinterpret_cast<uint2*>(dst) = make_uint2(q[0], q[1]);
              } else {
                *reinterpret_cast<uint32_t*>(dst) = q[0];
              }
            } else {
#pragma unroll
              for (int e = 0; e < kVec; ++e) {
                if (col0 + e < cols) dst[e] = (q[e / 4] >> (8 * (e % 4))) & 0xFFu;
              }
            }
          }
          if constexpr (kCol) {
            const int word = StagingWord<kTileWords>(i, tid * (kVec / 4));
            if constexpr (kVec == 8) {
              *reinterpret_cast<uint2*>(staging + 4 * word) =
                  make_uint2(q[0], q[1]);
            } else {
              *reinterpret_cast<uint32_t*>(staging + 4 * word) = q[0];
            }
          }
          if constexpr (kDbias) stack.Leaf(v, merges[i]);
        }
      }
    }
    if constexpr (kCol) {
      __syncthreads();
      WriteTransposedChunk<kTileCols>(
          staging, h, chunk_row, p.col + b * elements, n0,
          min(static_cast<int64_t>(kTileCols), cols - n0), p.rows,
          p.col_vector_ok);
    }
    chunk_row = chunk_end;
  }

  if constexpr (kDbias) {
    float sum[kVec];
    stack.Result(sum);
    if (p.cluster_levels > 0) {
      // Subtree sums -> rank 0, merged pairwise in tree order (an empty right
      // subtree merges as the identity).
      cg::cluster_group cluster = cg::this_cluster();
      float* mine = reinterpret_cast<float*>(smem + p.merge_offset);
#pragma unroll
      for (int e = 0; e < kVec; ++e) mine[e * kWalkThreads + tid] = sum[e];
      cluster.sync();
      if (group == 0) {
        const unsigned groups = 1u << p.cluster_levels;
        for (unsigned width = 1; width < groups; width *= 2) {
          for (unsigned g = 0; g + width < groups; g += 2 * width) {
            const walk::Subtree right = walk::DescendSubtree(
                p.axes, root, g + width, p.cluster_levels);
            if (right.rows == 0) continue;
            float* left_sum = cluster.map_shared_rank(mine, g);
            const float* right_sum = cluster.map_shared_rank(mine, g + width);
#pragma unroll
            for (int e = 0; e < kVec; ++e) {
              const int k = e * kWalkThreads + tid;
              left_sum[k] = __fadd_rn(left_sum[k], right_sum[k]);
            }
          }
        }
#pragma unroll
        for (int e = 0; e < kVec; ++e) sum[e] = mine[e * kWalkThreads + tid];
      }
      cluster.sync();  // keep every rank's shared memory until rank 0 is done
    }
    if (group == 0 && active) {
      float* dst = p.dbias + ((b * (p.nodes / p.split) + kept) * p.split + part) *
                                 cols + col0;
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        if (col0 + e < cols) dst[e] = CanonicalNan(sum[e]);
      }
    }
  }

  amax = BlockMax<kWalkThreads>(amax, warp_max);
  if (tid == 0) PublishAmax(p.amax + b, amax);
}

// ---------------------------------------------------------------------------
// Host side.

int SmCount() {
  static int cached[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 132;
  if (device >= 0 && device < 64 && cached[device] > 0) return cached[device];
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) !=
          cudaSuccess ||
      sms <= 0) {
    cudaGetLastError();
    sms = 132;
  }
  if (device >= 0 && device < 64) cached[device] = sms;
  return sms;
}

// EQX_QUANT_CUDA_PDL=0 launches the main kernel without programmatic
// dependent launch (plain stream order).
bool UsePdl() {
  static const bool use = [] {
    const char* value = std::getenv("EQX_QUANT_CUDA_PDL");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return use;
}

LaunchStatus Failed(cudaError_t error, const char* what) {
  LaunchStatus status;
  status.ok = false;
  status.cuda_error = static_cast<int>(error);
  status.what = what;
  return status;
}

LaunchStatus Invalid(const char* what) {
  LaunchStatus status;
  status.ok = false;
  status.invalid_argument = true;
  status.what = what;
  return status;
}

template <typename Params>
cudaError_t Launch(void (*kernel)(Params), dim3 grid, dim3 block,
                   size_t shared_bytes, cudaStream_t stream, int cluster,
                   const Params& params) {
  if (shared_bytes > 48 * 1024) {
    const cudaError_t error = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(shared_bytes));
    if (error != cudaSuccess) return error;
  }
  cudaLaunchAttribute attributes[2];
  unsigned count = 0;
  if (UsePdl()) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  if (cluster > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = static_cast<unsigned>(cluster);
    attributes[count].val.clusterDim.y = 1;
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  cudaError_t error = cudaLaunchKernelEx(&config, kernel, params);
  if (error == cudaSuccess) error = cudaGetLastError();
  return error;
}

// Resident blocks per SM of `kernel` (at least 1).
template <typename Params>
int BlocksPerSm(void (*kernel)(Params), int threads, size_t shared_bytes) {
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocks, kernel, threads, shared_bytes) != cudaSuccess ||
      blocks <= 0) {
    cudaGetLastError();
    blocks = 1;
  }
  return blocks;
}

bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <typename In, Fp8Format kFormat>
LaunchStatus LaunchCast(const Fp8QuantizeProblem& problem,
                        const Fp8QuantizeBuffers& buffers, cudaStream_t stream,
                        int sms) {
  CastParams p;
  p.x = buffers.x;
  p.scale = buffers.scale;
  p.row = buffers.row;
  p.amax = buffers.amax;
  p.batch = problem.batch;
  p.elements = problem.rows * problem.cols;
  p.aligned = Aligned16(buffers.x) && Aligned16(buffers.row);
  const int64_t grid_y = std::min<int64_t>(problem.batch, 65535);
  const int64_t vectors = p.elements / In::kVec + 1;
  const int64_t useful =
      (vectors + int64_t{kCastThreads} * kCastUnroll - 1) /
      (int64_t{kCastThreads} * kCastUnroll);
  // One full wave of resident blocks; the grid-stride loop does the rest.
  static const int blocks_per_sm =
      std::min(kCastBlocksPerSm,
               BlocksPerSm(&CastRowwiseKernel<In, kFormat>, kCastThreads, 0));
  const int64_t wanted =
      (int64_t{sms} * blocks_per_sm + grid_y - 1) / grid_y;
  const int64_t grid_x = std::max<int64_t>(1, std::min(useful, wanted));
  const cudaError_t error =
      Launch(&CastRowwiseKernel<In, kFormat>,
             dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)),
             dim3(kCastThreads), 0, stream, 1, p);
  if (error != cudaSuccess) return Failed(error, "launching CastRowwiseKernel");
  return LaunchStatus{};
}

template <typename In, Fp8Format kFormat, bool kCol, bool kDbias>
LaunchStatus LaunchWalk(const Fp8QuantizeProblem& problem,
                        const Fp8QuantizeBuffers& buffers, cudaStream_t stream,
                        int sms) {
  constexpr int kVec = In::kVec;
  constexpr int kTileCols = kWalkThreads * kVec;
  constexpr int kUnroll = WalkShape<kDbias>::kUnroll;
  WalkParams p = {};
  p.x = buffers.x;
  p.scale = buffers.scale;
  p.row = problem.rowwise ? buffers.row : nullptr;
  p.col = kCol ? buffers.col : nullptr;
  p.amax = buffers.amax;
  p.dbias = kDbias ? buffers.dbias : nullptr;
  p.batch = problem.batch;
  p.rows = problem.rows;
  p.cols = problem.cols;
  p.col_tiles = (problem.cols + kTileCols - 1) / kTileCols;
  p.vector_ok = Aligned16(buffers.x) && problem.cols % kVec == 0 &&
                (p.row == nullptr || Aligned16(p.row));
  p.col_vector_ok = kCol && Aligned16(buffers.col) && problem.rows % 16 == 0;
  // Enough blocks for one full wave of resident blocks (at least).
  static const int blocks_per_sm = std::min(
      kWalkBlocksPerSm,
      BlocksPerSm(&WalkKernel<In, kFormat, kCol, kDbias, kUnroll>, kWalkThreads,
                  kCol ? kChunkRows * kTileCols : 0));
  const int64_t target = int64_t{sms} * blocks_per_sm;

  int64_t shared_bytes = 0;
  int cluster_levels = 0;
  if constexpr (kDbias) {
    if (!walk::BuildNestedAxes(problem.dbias_reduced_dims, &p.axes)) {
      return Invalid("more than 16 reduced axes of length > 1");
    }
    p.split = problem.dbias_split;
    p.nodes = problem.dbias_kept_rows * problem.dbias_split;
    int64_t reduced_rows = 1;
    for (int64_t d : problem.dbias_reduced_dims) reduced_rows *= d;
    p.reduced_rows = reduced_rows;
    // The largest node.
    const int64_t n = p.axes.dims[0];
    walk::Subtree largest;
    largest.count = (n + p.split - 1) / p.split;
    largest.rows = largest.count * p.axes.strides[0];
    const int bound = walk::StackBound(p.axes, largest);
    const int overflow_levels =
        std::max(0, bound - kRegLevels);
    const int64_t blocks = p.col_tiles * p.nodes * p.batch;
    while (cluster_levels < kMaxClusterLevels &&
           (blocks << cluster_levels) < target &&
           (largest.rows >> (cluster_levels + 1)) >= 2 * kChunkRows) {
      ++cluster_levels;
    }
    shared_bytes = int64_t{overflow_levels} * kVec * kWalkThreads * 4;
    p.merge_offset = shared_bytes;
    if (cluster_levels > 0) shared_bytes += int64_t{kVec} * kWalkThreads * 4;
  } else {
    // Row ranges of 128, 64 or 32 rows: the largest that still fills the GPU.
    int64_t rows_per_node = 4 * kChunkRows;
    while (rows_per_node > kChunkRows &&
           p.col_tiles * ((problem.rows + rows_per_node - 1) / rows_per_node) *
                   problem.batch <
               target) {
      rows_per_node /= 2;
    }
    p.rows_per_node = rows_per_node;
    p.nodes = (problem.rows + rows_per_node - 1) / rows_per_node;
    p.split = 1;
    p.merge_offset = 0;
  }
  p.cluster_levels = cluster_levels;
  p.staging_offset = shared_bytes;
  if (kCol) shared_bytes += int64_t{kChunkRows} * kTileCols;

  const int64_t grid =
      (p.col_tiles * p.nodes * p.batch) << cluster_levels;
  if (grid <= 0) return LaunchStatus{};
  if (grid > int64_t{0x7FFFFFFF}) {
    return Invalid("too many thread blocks (the tensor is too large)");
  }
  if (shared_bytes > 200 * 1024) {
    return Invalid("the dbias tree is too deep for shared memory");
  }
  const cudaError_t error =
      Launch(&WalkKernel<In, kFormat, kCol, kDbias, kUnroll>,
             dim3(static_cast<unsigned>(grid)), dim3(kWalkThreads),
             static_cast<size_t>(shared_bytes), stream, 1 << cluster_levels, p);
  if (error != cudaSuccess) return Failed(error, "launching WalkKernel");
  return LaunchStatus{};
}

template <typename In, Fp8Format kFormat>
LaunchStatus LaunchMain(const Fp8QuantizeProblem& problem,
                        const Fp8QuantizeBuffers& buffers, cudaStream_t stream,
                        int sms) {
  if (problem.with_dbias) {
    if (problem.colwise) {
      return LaunchWalk<In, kFormat, true, true>(problem, buffers, stream, sms);
    }
    return LaunchWalk<In, kFormat, false, true>(problem, buffers, stream, sms);
  }
  if (problem.colwise) {
    return LaunchWalk<In, kFormat, true, false>(problem, buffers, stream, sms);
  }
  return LaunchCast<In, kFormat>(problem, buffers, stream, sms);
}

template <typename In>
LaunchStatus DispatchFormat(const Fp8QuantizeProblem& problem,
                            const Fp8QuantizeBuffers& buffers,
                            cudaStream_t stream, int sms) {
  switch (problem.format) {
    case Fp8Format::kE4M3Fn:
      return LaunchMain<In, Fp8Format::kE4M3Fn>(problem, buffers, stream, sms);
    case Fp8Format::kE5M2:
      return LaunchMain<In, Fp8Format::kE5M2>(problem, buffers, stream, sms);
  }
  return Invalid("unknown FP8 format");
}

// ---------------------------------------------------------------------------
// Self-test of the hardware convert against fp8_format.h.

__global__ void Fp8ConvertSelfTestKernel(unsigned long long* mismatches,
                                         unsigned int* first_bad) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < (uint64_t{1} << 32); i += stride) {
    const uint32_t bits = static_cast<uint32_t>(i);
    const float value = __uint_as_float(bits);
    const float other = -value;  // the second lane of each pair
    const uint32_t hw_e4m3 = CvtPair<Fp8Format::kE4M3Fn>(value, other);
    const uint32_t sw_e4m3 =
        FloatToE4M3Fn(value) | (static_cast<uint32_t>(FloatToE4M3Fn(other)) << 8);
    const uint32_t hw_e5m2 = CvtPair<Fp8Format::kE5M2>(value, other);
    const uint32_t sw_e5m2 =
        FloatToE5M2(value) | (static_cast<uint32_t>(FloatToE5M2(other)) << 8);
    if (hw_e4m3 != sw_e4m3 || hw_e5m2 != sw_e5m2) {
      atomicAdd(mismatches, 1ull);
      atomicMin(first_bad, bits);
    }
  }
}

}  // namespace

LaunchStatus Fp8Quantize(const Fp8QuantizeProblem& problem,
                         const Fp8QuantizeBuffers& buffers,
                         CUstream_st* stream) {
  if (problem.batch <= 0) return LaunchStatus{};
  const int sms = SmCount();

  const int64_t init_blocks =
      std::min<int64_t>((problem.batch + 255) / 256, 1024);
  InitKernel<<<static_cast<unsigned>(init_blocks), 256, 0, stream>>>(
      buffers.scale, buffers.scale_inv, buffers.amax, problem.batch);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return Failed(error, "launching InitKernel");

  const int64_t elements = problem.rows * problem.cols;
  const int64_t dbias_elements =
      problem.with_dbias
          ? problem.dbias_kept_rows * problem.dbias_split * problem.cols
          : 0;
  if (elements == 0 && dbias_elements == 0) return LaunchStatus{};

  switch (problem.input_type) {
    case InputType::kF32:
      return DispatchFormat<F32Input>(problem, buffers, stream, sms);
    case InputType::kF16:
      return DispatchFormat<F16Input>(problem, buffers, stream, sms);
    case InputType::kBF16:
      return DispatchFormat<Bf16Input>(problem, buffers, stream, sms);
  }
  return Invalid("unknown input type");
}

}  // namespace eqx_quant::cuda

// Runs the hardware FP8 convert and fp8_format.h's FloatToFp8 on all 2^32 f32
// bit patterns (each paired with its negation), for e4m3fn and e5m2. Writes
// the number of differing pairs and the smallest differing input's bits
// (0xFFFFFFFF if none). Returns the cudaError_t (0 = success). Allocates, so
// it is for tests only, never inside an XLA computation.
extern "C" int EqxQuantCudaFp8ConvertSelfTest(unsigned long long* mismatches,
                                              unsigned int* first_bad_bits) {
  using eqx_quant::cuda::Fp8ConvertSelfTestKernel;
  unsigned long long* d_mismatches = nullptr;
  unsigned int* d_first = nullptr;
  cudaStream_t stream = nullptr;
  cudaError_t error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (error == cudaSuccess) error = cudaMalloc(&d_mismatches, sizeof(*d_mismatches));
  if (error == cudaSuccess) error = cudaMalloc(&d_first, sizeof(*d_first));
  if (error == cudaSuccess) {
    error = cudaMemsetAsync(d_mismatches, 0, sizeof(*d_mismatches), stream);
  }
  if (error == cudaSuccess) {
    error = cudaMemsetAsync(d_first, 0xFF, sizeof(*d_first), stream);
  }
  if (error == cudaSuccess) {
    Fp8ConvertSelfTestKernel<<<eqx_quant::cuda::SmCount() * 8, 256, 0,
                               stream>>>(d_mismatches, d_first);
    error = cudaGetLastError();
  }
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(mismatches, d_mismatches, sizeof(*mismatches),
                            cudaMemcpyDeviceToHost, stream);
  }
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(first_bad_bits, d_first, sizeof(*first_bad_bits),
                            cudaMemcpyDeviceToHost, stream);
  }
  if (error == cudaSuccess) error = cudaStreamSynchronize(stream);
  if (d_mismatches != nullptr) cudaFree(d_mismatches);
  if (d_first != nullptr) cudaFree(d_first);
  if (stream != nullptr) cudaStreamDestroy(stream);
  return static_cast<int>(error);
}
