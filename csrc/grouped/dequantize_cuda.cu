// Two launches. GroupLayout (one CTA) writes every group's first row and
// scale-region offset (the prefix sums of common/grouped_layout.h) into the
// scratch with block scans. DecodeOctets reads the tensor as a flat run of
// octets (8 elements of a row; 8 | N then makes octet q the bytes [8q, 8q + 8)
// of the payload and the elements [8q, 8q + 8) of the output): one 8-byte
// load and one 16-byte store per octet, consecutive threads on consecutive
// octets, so every warp access is contiguous. It is launched with
// programmatic dependent launch and waits for GroupLayout only after its
// payload loads are in flight.
//
// A thread keeps the rows [first, end) of the group it last found: its rows
// only grow, so it searches the starts (binary, O(log G)) only when it enters
// another group. No integer division by a variable: the row of an octet is a
// multiply-high by a divisor's magic number made on the host, and a thread's
// next octet (32 on) steps the row and column by host-made amounts.
//
// Decoding: cuda/mx_octet_decode.cuh (DecodeOctet), exact.

#include <cuda_runtime.h>

#include <cstdint>

#include "common/ceil_log2.h"
#include "common/fp8_format.h"
#include "common/grouped_layout.h"
#include "common/host_device.h"
#include "common/mx_decode.h"
#include "cuda/mx_octet_decode.cuh"
#include "fp8/launch_cuda.h"
#include "grouped/dequantize_cuda.h"
#include "grouped/device_cuda.cuh"

namespace eqx_quant::cuda {
namespace {

using grouped::CeilDiv;
using grouped::kMxfp8Block;
using grouped::kTileCols;
using grouped::kTileRows;
using grouped::PadTo;

constexpr int kThreads = grouped_dev::kThreads;  // BlockExclusiveScan's CTA
constexpr int kVec = 8;                           // elements per octet
constexpr int kIter = 4;                          // octets per thread and span
constexpr int kWarpOctets = 32 * kIter;           // a warp's run of a span
constexpr int64_t kSpan = int64_t{kThreads} * kIter;  // octets per CTA step
constexpr int kOctetsPerBlock = kMxfp8Block / kVec;   // 4, one scale
static_assert(kOctetsPerBlock == 4 && kTileCols == 4 && kTileRows == 128,
              "ScaleRowBase and the column offset hard-code the 128 x 4 tile");

// The scale value of an octet in a row of no group: it decodes to zeros.
constexpr uint32_t kNoGroup = 0x100;

// n / d for 0 <= n < 2^63 and 1 <= d < 2^63 as (umulhi(n, magic) + n) >> shift
// (common/magic_division.h with 64-bit words: magic = floor(2^64 (2^shift -
// d) / d) + 1 < 2^64 for shift = ceil(log2(d)), and umulhi(n, magic) <= n
// keeps the sum below 2^64).
struct Divisor64 {
  uint64_t magic = 0;
  int shift = 0;
};

inline Divisor64 MakeDivisor64(uint64_t d) {
  const int shift = CeilLog2(static_cast<int64_t>(d));
  const unsigned __int128 numerator =
      static_cast<unsigned __int128>((uint64_t{1} << shift) - d) << 64;
  return Divisor64{static_cast<uint64_t>(numerator / d + 1), shift};
}

EQX_QUANT_HOST_DEVICE inline uint64_t Quotient64(uint64_t n, Divisor64 d) {
#if defined(__CUDA_ARCH__)
  const uint64_t high = __umul64hi(n, d.magic);
#else
  const uint64_t high =
      static_cast<uint64_t>((static_cast<unsigned __int128>(n) * d.magic) >> 64);
#endif
  return (high + n) >> d.shift;
}

struct LayoutParams {
  const int32_t* sizes;  // (G,)
  int64_t groups;        // G
  int64_t cols;          // N
  grouped_dev::RowSpec row_spec;
  int64_t* starts;   // G + 1: the scratch's first half
  int64_t* offsets;  // G + 1: its second half
};

struct DecodeParams {
  int64_t cols;           // N
  int64_t groups;         // G
  const uint8_t* data;    // R x N
  const uint8_t* scales;  // the swizzled scale buffer
  uint16_t* out;          // R x N
  const int64_t* starts;  // G + 1 (scratch, written by GroupLayout)
  const int64_t* offsets;  // G + 1
  int64_t octets;         // R * row_octets
  uint32_t row_octets;    // ceil(N / 8) < 2^31
  Divisor64 row_divisor;  // by row_octets
  uint32_t step_rows;     // 32 / row_octets
  uint32_t step_octets;   // 32 % row_octets
  int64_t band_bytes;     // 128 rows of a region: 128 * pad4(ceil(N / 32))
  int64_t spans;          // ceil(octets / kSpan)
};

__global__ void __launch_bounds__(kThreads) GroupLayout(LayoutParams p) {
  // The decode grid may launch now; it waits for this grid to finish before
  // it reads the layout.
  fp8::AllowDependentGrids();
  __shared__ int64_t warp_sums[grouped_dev::kWarps];
  const int64_t rows = p.row_spec.rows;
  const int64_t region_cols = PadTo(CeilDiv(p.cols, kMxfp8Block), kTileCols);
  // start_g = min(R, sum_{h<g} ClampedRows(h)), grouped::GroupStarts's value;
  // clamping the carry to R per chunk keeps the sums far from overflow.
  int64_t row_carry = 0;
  int64_t byte_carry = 0;
  for (int64_t first = 0; first < p.groups; first += kThreads) {
    const int64_t g = first + threadIdx.x;
    const int64_t group_rows = g < p.groups ? grouped_dev::ClampedRows(p.sizes[g], p.row_spec) : 0;
    int64_t chunk_rows;
    const int64_t before = grouped_dev::BlockExclusiveScan(group_rows, &chunk_rows, warp_sums);
    const int64_t start = min(rows, row_carry + before);
    const int64_t end = min(rows, row_carry + before + group_rows);
    // grouped::GroupScaleRegion(kRowwise, end - start, N, 32).bytes()
    const int64_t bytes = PadTo(end - start, kTileRows) * region_cols;
    int64_t chunk_bytes;
    const int64_t bytes_before = grouped_dev::BlockExclusiveScan(bytes, &chunk_bytes, warp_sums);
    if (g < p.groups) {
      p.starts[g] = start;
      p.offsets[g] = byte_carry + bytes_before;
    }
    row_carry = min(rows, row_carry + chunk_rows);
    byte_carry += chunk_bytes;
  }
  if (threadIdx.x == 0) {
    p.starts[p.groups] = row_carry;
    p.offsets[p.groups] = byte_carry;
  }
}

// The group a thread last found: rows [first, end) from `region` on.
struct GroupCache {
  int64_t group = 0;
  int64_t first = 0;
  int64_t end = 0;  // first == end: nothing found yet
  int64_t region = 0;
};

// The byte offset of row r's scales (block column 0) in the buffer, for
// r < starts[G]: its group's region offset plus SwizzleOffset(r - start, 0).
__device__ __forceinline__ int64_t ScaleRowBase(const DecodeParams& p, int64_t r,
                                                GroupCache& cache) {
  if (r >= cache.end) {
    // The last group whose start is <= r (empty groups share the next one's
    // start); a thread's rows only grow, so it is not below cache.group. Its
    // end is > r as r < starts[G].
    int64_t lo = cache.group;
    int64_t hi = p.groups - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (p.starts[mid] <= r) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    cache.group = lo;
    cache.first = p.starts[lo];
    cache.end = p.starts[lo + 1];
    cache.region = p.offsets[lo];
  }
  const int64_t i = r - cache.first;
  return cache.region + (i >> 7) * p.band_bytes + (i & 31) * 16 + ((i >> 5) & 3) * 4;
}

// An octet of a thread's run: its row, counted from the run's first row,
// and its octet in the row (elements [8 col, 8 col + 8)), stepped 32 octets
// at a time. 32-bit: the run covers at most kIter * 32 rows, and the host
// keeps ceil(N / 8) below 2^31.
struct RunPosition {
  uint32_t row;
  uint32_t col;

  __device__ __forceinline__ void Step(const DecodeParams& p) {
    row += p.step_rows;
    col += p.step_octets;
    if (col >= p.row_octets) {
      col -= p.row_octets;
      ++row;
    }
  }
};

// 8 read-once payload bytes, not kept in L1 (the layout stays there). Not an
// ld.global.nc: ptxas moves griddepcontrol.wait above those, and the loads
// should be in flight while this thread waits for the layout.
__device__ __forceinline__ uint2 LoadPayload8(const uint8_t* p) {
  uint2 r;
  asm volatile("ld.global.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
               : "=r"(r.x), "=r"(r.y)
               : "l"(p));
  return r;
}

// kAligned: N % 8 == 0 and the buffers aligned, so that octet q is the
// 8 bytes at 8q and the 16 output bytes at 16q. Otherwise rows start anywhere
// and the octets go element by element, a row's last one cut at N.
template <typename Format, bool kAligned>
__global__ void __launch_bounds__(kThreads) DecodeOctets(DecodeParams p) {
  GroupCache cache;
  for (int64_t span = blockIdx.x; span < p.spans; span += gridDim.x) {
    // Warp w takes the kWarpOctets octets from w * kWarpOctets on, 32 per
    // iteration: each access is a warp's 32 consecutive octets, and a thread's
    // octets lie in one row unless the run crosses a row's end.
    const int64_t q0 = span * kSpan + (threadIdx.x / 32) * kWarpOctets + threadIdx.x % 32;
    const int64_t row0 =
        static_cast<int64_t>(Quotient64(static_cast<uint64_t>(q0), p.row_divisor));
    const RunPosition at0{0, static_cast<uint32_t>(q0 - row0 * p.row_octets)};
    // Octet q0 + 32 * it exists for it < live.
    const int64_t left = p.octets - q0;
    const int live =
        left <= 0 ? 0 : (left >= kWarpOctets ? kIter : static_cast<int>((left + 31) / 32));

    uint2 raw[kIter];
    RunPosition at = at0;
#pragma unroll
    for (int it = 0; it < kIter; ++it) {
      raw[it] = make_uint2(0, 0);
      if (it < live) {
        if constexpr (kAligned) {
          raw[it] = LoadPayload8(p.data + (q0 + 32 * it) * kVec);
        } else {
          const uint8_t* src = p.data + (row0 + at.row) * p.cols + int64_t{at.col} * kVec;
          const int64_t count = min(int64_t{kVec}, p.cols - int64_t{at.col} * kVec);
#pragma unroll
          for (int t = 0; t < kVec; ++t) {
            const uint32_t byte = t < count ? __ldg(src + t) : 0;
            if (t < 4) {
              raw[it].x |= byte << (8 * t);
            } else {
              raw[it].y |= byte << (8 * (t - 4));
            }
          }
        }
      }
      at.Step(p);
    }

    // The layout comes from GroupLayout, the previous grid in the stream.
    fp8::WaitForPrerequisiteGrids();
    // Run rows below grouped belong to a group (the rest decode to zeros).
    const int64_t rows_left = p.starts[p.groups] - row0;
    const uint32_t grouped =
        rows_left <= 0 ? 0 : static_cast<uint32_t>(min(rows_left, int64_t{kWarpOctets + 1}));
    uint32_t scale[kIter];
    uint32_t scales_row = ~0u;
    const uint8_t* row_scales = p.scales;
    at = at0;
#pragma unroll
    for (int it = 0; it < kIter; ++it) {
      scale[it] = kNoGroup;
      if (it < live && at.row < grouped) {
        if (at.row != scales_row) {
          scales_row = at.row;
          row_scales = p.scales + ScaleRowBase(p, row0 + at.row, cache);
        }
        // Block column j = col / 4: tile j / 4, byte j % 4 of the tile's row.
        scale[it] = __ldg(row_scales + (((at.col >> 4) * 512) | ((at.col >> 2) & 3)));
      }
      at.Step(p);
    }

    at = at0;
#pragma unroll
    for (int it = 0; it < kIter; ++it) {
      if (it < live) {
        const uint4 bits = scale[it] == kNoGroup
                               ? make_uint4(0, 0, 0, 0)
                               : DecodeOctet<Format>(raw[it].x, raw[it].y, scale[it]);
        if constexpr (kAligned) {
          *reinterpret_cast<uint4*>(p.out + (q0 + 32 * it) * kVec) = bits;
        } else {
          uint16_t* dst = p.out + (row0 + at.row) * p.cols + int64_t{at.col} * kVec;
          const int64_t count = min(int64_t{kVec}, p.cols - int64_t{at.col} * kVec);
          const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
          for (int t = 0; t < kVec; ++t) {
            if (t < count) dst[t] = static_cast<uint16_t>(words[t / 2] >> (16 * (t % 2)));
          }
        }
      }
      at.Step(p);
    }
  }
}

bool IsAligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

template <typename Format>
cudaError_t LaunchDecode(const DecodeParams& p, bool aligned, unsigned ctas,
                         cudaStream_t stream) {
  auto* kernel = aligned ? &DecodeOctets<Format, true> : &DecodeOctets<Format, false>;
  return fp8::Launch(kernel, dim3(ctas), dim3(kThreads), 0, stream, 1, p);
}

}  // namespace

GroupedDequantizeStatus GroupedMxfp8DequantizeBf16(const GroupedMxfp8DequantizeProblem& problem,
                                                   CUstream_st* stream) {
  if (problem.rows == 0 || problem.cols == 0) return {};
  const int64_t row_octets = CeilDiv(problem.cols, kVec);
  if (row_octets > 0x7FFFFFFF) return {false, 0, "more than 2^34 - 8 columns"};
  LayoutParams layout;
  layout.sizes = problem.sizes;
  layout.groups = problem.groups;
  layout.cols = problem.cols;
  layout.row_spec = grouped_dev::RowSpec::Make(problem.rows, problem.rows_per_unit);
  layout.starts = problem.layout;
  layout.offsets = problem.layout + problem.groups + 1;
  GroupLayout<<<1, kThreads, 0, stream>>>(layout);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return {false, static_cast<int>(error), "group layout launch"};

  DecodeParams p;
  p.cols = problem.cols;
  p.groups = problem.groups;
  p.data = problem.data;
  p.scales = problem.scales;
  p.out = problem.out;
  p.starts = layout.starts;
  p.offsets = layout.offsets;
  p.row_octets = static_cast<uint32_t>(row_octets);
  p.octets = problem.rows * row_octets;
  p.row_divisor = MakeDivisor64(static_cast<uint64_t>(row_octets));
  p.step_rows = 32 / p.row_octets;
  p.step_octets = 32 % p.row_octets;
  p.band_bytes = kTileRows * PadTo(CeilDiv(problem.cols, kMxfp8Block), kTileCols);
  p.spans = CeilDiv(p.octets, kSpan);
  const bool aligned = problem.cols % kVec == 0 && IsAligned(problem.data, 8) &&
                       IsAligned(problem.out, 16);
  // Past 2^31 - 1 CTAs the grid-stride loop takes the rest.
  const unsigned ctas = static_cast<unsigned>(p.spans < 0x7FFFFFFF ? p.spans : 0x7FFFFFFF);
  if (problem.format == Fp8Format::kE4M3Fn) {
    error = LaunchDecode<E4M3Fn>(p, aligned, ctas, stream);
  } else {
    error = LaunchDecode<E5M2>(p, aligned, ctas, stream);
  }
  if (error != cudaSuccess) return {false, static_cast<int>(error), "decode launch"};
  return {};
}

}  // namespace eqx_quant::cuda
