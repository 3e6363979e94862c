// Probe (not part of the library): where the FP8 delayed cast + transpose
// (rowwise and transposed e4m3 copies of bf16 x, with the amax) loses to a
// bare cast with two outputs. The library's CastTransposeTileKernel<256>
// (128 x 256 tiles, 256 threads, two batches of 8 loads per thread, a staging
// tile, a barrier, the transposed write-out) measures ~71.7 us at 8192^2 in
// the benchmark, 1.14x the floor, while the one-output rowwise cast runs at
// 1.05x. This probe times, in one harness (back-to-back launches, buffers
// rotated over more than the L2):
//   * the D2D copy and bare casts with one and two outputs (the references);
//   * the library's tile structure in several tile shapes;
//   * the same with the transposed bytes written to contiguous tile-sized
//     chunks (the access pattern of the transposed copy, removed);
//   * the same without the transposed write-out (the structure's cost);
//   * persistent CTAs that load the next tile's first rows during the
//     write-out of this one.
// Built and run by benchmarks/probes/gpu_cast_transpose on the H200 machine. Prints one
// line per variant: microseconds per launch (median of 7 batches of 40
// launches), GB/s (x read once, both copies written once) and % of the copy.

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "fp8/device_cuda.cuh"
#include "probe_common.h"

namespace {

using eqx_quant::Fp8Format;
using eqx_quant::cuda::StageCastWords;
using eqx_quant::cuda::StoreCastWords;
using eqx_quant::cuda::fp8::Bf16Input;
using eqx_quant::cuda::fp8::CastVec;
using eqx_quant::cuda::fp8::Transpose16x4;
using probe::Check;
using probe::CopyMicroseconds;
using probe::Fill;
using probe::LoadStreaming;
using probe::MedianMicroseconds;
using probe::StoreStreaming16;

constexpr int kBuffers = 4;
constexpr int kLaunches = 40;
constexpr int kBatches = 7;
constexpr int kVec = 8;     // bf16 per 16-byte load
constexpr int kUnroll = 8;  // loads in flight per thread and batch
constexpr float kScale = 3.5f;

struct Args {
  const uint16_t* x;
  uint8_t* row;
  uint8_t* col;
  float* amax;
  int64_t rows;
  int64_t cols;
};

// What a variant writes of the transposed copy.
enum class Out { kTransposed, kTileChunks, kNone };

// A tile kernel's variant: the tile (kRows x kCols on kThreads, kMinBlocks
// per SM), what it writes, 16-byte loads with the L2::256B prefetch hint or
// not, the transposed stores' cache operator (.cs: evict first, as the
// library; else .wb, the default), and the tile order: kSuper == 0 is the
// library's (column tiles fastest on a 2D grid), else a 1D grid walking
// super-rows of kSuper row tiles, row tiles fastest inside one.
template <int kRows_, int kCols_, int kThreads_, int kMinBlocks_,
          Out kOut_ = Out::kTransposed, bool k256_ = false, bool kCs_ = true,
          int kSuper_ = 0>
struct Config {
  static constexpr int kRows = kRows_;
  static constexpr int kCols = kCols_;
  static constexpr int kThreads = kThreads_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr Out kOut = kOut_;
  static constexpr bool k256 = k256_;
  static constexpr bool kCs = kCs_;
  static constexpr int kSuper = kSuper_;
};

// A kRows x kCols staged tile: words XOR-swizzled by 16-row block so that the
// write-out's 16-row column reads are free of bank conflicts.
template <int kRows, int kCols>
struct Staging {
  static constexpr int kWords = kCols / 4;
  static constexpr int kBlocks = kRows / 16;
  static constexpr int kUnits = kWords * kBlocks;
  static constexpr int kSize = kRows * kWords;
  static_assert(kWords % 32 == 0 && kBlocks <= 16, "tile shape");
  static __device__ __forceinline__ int At(int row, int word) {
    return row * kWords + (word ^ ((32 / kBlocks) * ((row >> 4) % kBlocks)));
  }
};

// 16 bytes with the default cache operator.
__device__ __forceinline__ void StoreDefault16(void* dst, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(v.x),
               "r"(v.y), "r"(v.z), "r"(v.w));
}

// Unit `unit` of the staged tile at (m0, n0) to the transposed copy.
template <int kRows, int kCols, Out kOut, bool kCs = true>
__device__ __forceinline__ void WriteUnit(const uint32_t* staging, int unit,
                                          const Args& a, int64_t m0,
                                          int64_t n0, int64_t tile) {
  using S = Staging<kRows, kCols>;
  const int block = unit % S::kBlocks;
  const int group = unit / S::kBlocks;
  uint32_t w[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) w[k] = staging[S::At(16 * block + k, group)];
  uint32_t out[4][4];
  Transpose16x4(w, out);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint8_t* dst;
    if constexpr (kOut == Out::kTransposed) {
      dst = a.col + (n0 + 4 * group + q) * a.rows + m0 + 16 * block;
    } else {
      dst = a.col + tile * (kRows * kCols) + (4 * group + q) * kRows + 16 * block;
    }
    const uint4 v = make_uint4(out[q][0], out[q][1], out[q][2], out[q][3]);
    if constexpr (kCs) {
      StoreStreaming16(dst, v);
    } else {
      StoreDefault16(dst, v);
    }
  }
}

// The rowwise part of one batch: cast, stage, store; the running amax.
template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ float CastBatch(const uint4 (&raw)[kUnroll],
                                           uint32_t* staging, const Args& a,
                                           int64_t m0, int64_t n0, int k0,
                                           float amax) {
  constexpr int kColLanes = kCols / kVec;
  constexpr int kRowLanes = kThreads / kColLanes;
  const int col_lane = threadIdx.x % kColLanes;
  const int row_lane = threadIdx.x / kColLanes;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int r = row_lane + kRowLanes * (k0 + u);
    float v[kVec];
    Bf16Input::Unpack(raw[u], v);
#pragma unroll
    for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, fabsf(v[e]));
    uint32_t q[2];
    CastVec<Fp8Format::kE4M3Fn>(v, kScale, q);
    StageCastWords(&staging[Staging<kRows, kCols>::At(r, col_lane * 2)], q);
    StoreCastWords(a.row + (m0 + r) * a.cols + n0 + col_lane * kVec, q);
  }
  return amax;
}

// A 16-byte load with the L2::256B prefetch size hint.
__device__ __forceinline__ uint4 Load256(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

template <int kRows, int kCols, int kThreads, bool k256 = false>
__device__ __forceinline__ void LoadBatch(const Args& a, int64_t m0,
                                          int64_t n0, int k0,
                                          uint4 (&raw)[kUnroll]) {
  constexpr int kColLanes = kCols / kVec;
  constexpr int kRowLanes = kThreads / kColLanes;
  const int col_lane = threadIdx.x % kColLanes;
  const int row_lane = threadIdx.x / kColLanes;
  const uint16_t* at =
      a.x + (m0 + row_lane + kRowLanes * k0) * a.cols + n0 + col_lane * kVec;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint16_t* p = at + int64_t{kRowLanes} * u * a.cols;
    raw[u] = k256 ? Load256(p) : LoadStreaming(p);
  }
}

template <int kThreads>
__device__ __forceinline__ void PublishMax(float amax, float* scratch,
                                           float* out) {
  amax = eqx_quant::cuda::fp8::BlockMax<kThreads>(amax, scratch);
  if (threadIdx.x == 0) {
    atomicMax(reinterpret_cast<unsigned int*>(out), __float_as_uint(amax));
  }
}

// The library's structure: one tile per CTA.
template <typename C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) TileKernel(const Args a) {
  constexpr int kRows = C::kRows;
  constexpr int kCols = C::kCols;
  constexpr int kThreads = C::kThreads;
  using S = Staging<kRows, kCols>;
  constexpr int kRowsPerThread = kRows * kCols / kVec / kThreads;
  static_assert(kRowsPerThread % kUnroll == 0, "whole batches");
  __shared__ __align__(16) uint32_t staging[S::kSize];
  __shared__ float scratch[kThreads / 32];
  int row_tile;
  int col_tile;
  if constexpr (C::kSuper == 0) {
    row_tile = blockIdx.y;
    col_tile = blockIdx.x;
  } else {
    const int col_tiles = static_cast<int>(a.cols / kCols);
    const int per_super = C::kSuper * col_tiles;
    const int super = blockIdx.x / per_super;
    const int in_super = blockIdx.x % per_super;
    row_tile = super * C::kSuper + in_super % C::kSuper;
    col_tile = in_super / C::kSuper;
  }
  const int64_t m0 = int64_t{row_tile} * kRows;
  const int64_t n0 = int64_t{col_tile} * kCols;
  float amax = 0.0f;
#pragma unroll 1
  for (int k0 = 0; k0 < kRowsPerThread; k0 += kUnroll) {
    uint4 raw[kUnroll];
    LoadBatch<kRows, kCols, kThreads, C::k256>(a, m0, n0, k0, raw);
    amax = CastBatch<kRows, kCols, kThreads>(raw, staging, a, m0, n0, k0, amax);
  }
  __syncthreads();
  if constexpr (C::kOut != Out::kNone) {
    const int64_t tile = int64_t{row_tile} * (a.cols / kCols) + col_tile;
#pragma unroll
    for (int unit = threadIdx.x; unit < S::kUnits; unit += kThreads) {
      WriteUnit<kRows, kCols, C::kOut, C::kCs>(staging, unit, a, m0, n0, tile);
    }
  }
  PublishMax<kThreads>(amax, scratch, a.amax);
}

// Persistent CTAs dealing tiles round robin; the first batch of the next tile
// is loaded before this tile's write-out.
template <int kRows, int kCols, int kThreads, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    PrefetchKernel(const Args a, int col_tiles, int tiles) {
  using S = Staging<kRows, kCols>;
  constexpr int kRowsPerThread = kRows * kCols / kVec / kThreads;
  static_assert(kRowsPerThread % kUnroll == 0, "whole batches");
  __shared__ __align__(16) uint32_t staging[S::kSize];
  __shared__ float scratch[kThreads / 32];
  float amax = 0.0f;
  int t = blockIdx.x;
  uint4 first[kUnroll];
  if (t < tiles) {
    LoadBatch<kRows, kCols, kThreads>(a, int64_t{t / col_tiles} * kRows,
                                      int64_t{t % col_tiles} * kCols, 0, first);
  }
  for (; t < tiles; t += gridDim.x) {
    const int64_t m0 = int64_t{t / col_tiles} * kRows;
    const int64_t n0 = int64_t{t % col_tiles} * kCols;
    amax = CastBatch<kRows, kCols, kThreads>(first, staging, a, m0, n0, 0, amax);
#pragma unroll 1
    for (int k0 = kUnroll; k0 < kRowsPerThread; k0 += kUnroll) {
      uint4 raw[kUnroll];
      LoadBatch<kRows, kCols, kThreads>(a, m0, n0, k0, raw);
      amax = CastBatch<kRows, kCols, kThreads>(raw, staging, a, m0, n0, k0, amax);
    }
    __syncthreads();
    const int next = t + gridDim.x;
    if (next < tiles) {
      LoadBatch<kRows, kCols, kThreads>(a, int64_t{next / col_tiles} * kRows,
                                        int64_t{next % col_tiles} * kCols, 0,
                                        first);
    }
#pragma unroll
    for (int unit = threadIdx.x; unit < S::kUnits; unit += kThreads) {
      WriteUnit<kRows, kCols, Out::kTransposed>(staging, unit, a, m0, n0, 0);
    }
    __syncthreads();
  }
  PublishMax<kThreads>(amax, scratch, a.amax);
}

// Counts the bytes where col is not the transpose of row (8192^2 x 1 byte).
int64_t Mismatches(const uint8_t* row, const uint8_t* col, int64_t side) {
  std::vector<uint8_t> r(side * side);
  std::vector<uint8_t> c(side * side);
  Check(cudaMemcpy(r.data(), row, side * side, cudaMemcpyDeviceToHost), "copy row");
  Check(cudaMemcpy(c.data(), col, side * side, cudaMemcpyDeviceToHost), "copy col");
  int64_t bad = 0;
  for (int64_t m = 0; m < side; ++m) {
    for (int64_t n = 0; n < side; ++n) bad += r[m * side + n] != c[n * side + m];
  }
  return bad;
}

// Bare casts: 4 vectors per thread, one or two outputs (the second with the
// rowwise layout), 8-byte stores.
template <int kOutputs>
__global__ void __launch_bounds__(256) BareCast(const Args a) {
  const int64_t vectors = a.rows * a.cols / kVec;
  const int64_t base = int64_t{blockIdx.x} * 256 * 4 + threadIdx.x;
  const uint4* x = reinterpret_cast<const uint4*>(a.x);
  uint4 raw[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int64_t i = base + u * 256;
    if (i < vectors) raw[u] = LoadStreaming(x + i);
  }
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int64_t i = base + u * 256;
    if (i < vectors) {
      float v[kVec];
      Bf16Input::Unpack(raw[u], v);
      uint32_t q[2];
      CastVec<Fp8Format::kE4M3Fn>(v, kScale, q);
      StoreCastWords(a.row + i * kVec, q);
      if constexpr (kOutputs == 2) StoreCastWords(a.col + i * kVec, q);
    }
  }
}

struct Variant {
  const char* name;
  void (*kernel)(Args);
  int rows;  // tile shape (0: a bare cast)
  int cols;
  int threads;
  int outputs;  // copies written
  int super;    // Config::kSuper
  bool check = false;  // compare the transposed copy with the rowwise one
};

template <typename C>
Variant V(const char* name) {
  return Variant{name, &TileKernel<C>, C::kRows, C::kCols, C::kThreads,
                 C::kOut == Out::kNone ? 1 : 2, C::kSuper,
                 C::kOut == Out::kTransposed};
}

// The buffers of a run (x and both copies rotated over kBuffers) and the
// copy bandwidth that the variants are compared with.
struct Rig {
  int64_t side;
  std::vector<uint16_t*> x;
  std::vector<uint8_t*> row;
  std::vector<uint8_t*> col;
  float* amax;
  double copy_gbps;
  cudaStream_t stream;

  // Launch i's arguments: each buffer set in turn, x, row and col from
  // different sets.
  Args Rotated(int i) const {
    return Args{x[(i + 1) % kBuffers], row[i % kBuffers], col[(i + 2) % kBuffers],
                amax, side, side};
  }

  // Times launch(args) back to back and prints a line; with `check`, runs it
  // once more on buffer set 0 and counts the transposed bytes that are not
  // the rowwise copy's.
  template <typename Launch>
  void Time(const char* name, int outputs, bool check, Launch launch) const {
    const double us = MedianMicroseconds<kLaunches, kBatches>(
        [&](int i) {
          launch(Rotated(i));
          Check(cudaGetLastError(), name);
        },
        stream);
    const double gbps = (2.0 + outputs) * side * side / us * 1e-3;
    std::printf("%8.2f us  %6.0f GB/s  %5.1f%%  %s", us, gbps, 100.0 * gbps / copy_gbps,
                name);
    if (check) {
      launch(Args{x[0], row[0], col[0], amax, side, side});
      Check(cudaStreamSynchronize(stream), name);
      std::printf(" [%lld transposed bytes wrong]",
                  static_cast<long long>(Mismatches(row[0], col[0], side)));
    }
    std::printf("\n");
  }
};

// A persistent PrefetchKernel variant: one wave of resident CTAs.
template <int kRows, int kCols, int kThreads, int kMinBlocks>
void RunPrefetch(const char* name, int sms, const Rig& rig, bool check) {
  auto* kernel = &PrefetchKernel<kRows, kCols, kThreads, kMinBlocks>;
  int per_sm = 0;
  Check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0),
        "occupancy");
  const int col_tiles = static_cast<int>(rig.side / kCols);
  const int tiles = col_tiles * static_cast<int>(rig.side / kRows);
  const int grid = sms * per_sm;
  const std::string label = std::string(name) + " (" + std::to_string(per_sm) +
                            " CTAs per SM)";
  rig.Time(label.c_str(), 2, check, [&](const Args& a) {
    kernel<<<grid, kThreads, 0, rig.stream>>>(a, col_tiles, tiles);
  });
}

}  // namespace

int main() {
  int sms = 0;
  Check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sms");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  using Library = Config<128, 256, 256, 4>;
  const Variant variants[] = {
      {"bare cast, 1 output", &BareCast<1>, 0, 0, 256, 1, 0},
      {"bare cast, 2 outputs", &BareCast<2>, 0, 0, 256, 2, 0},
      V<Library>("tile 128x256 / 256 thr (the library's)"),
      V<Config<128, 256, 256, 4, Out::kTransposed, true>>("tile 128x256, loads with L2::256B"),
      V<Config<128, 256, 256, 4, Out::kTransposed, false, false>>("tile 128x256, transposed stores .wb"),
      V<Config<128, 256, 256, 4, Out::kTileChunks>>("tile 128x256, transposed bytes in tile chunks"),
      V<Config<128, 256, 256, 4, Out::kNone>>("tile 128x256, no transposed write-out"),
      V<Config<128, 256, 256, 4, Out::kTransposed, false, true, 8>>("tile 128x256, super-rows of 8 row tiles"),
      V<Config<128, 256, 256, 4, Out::kTransposed, false, true, 32>>("tile 128x256, super-rows of 32 row tiles"),
      V<Config<128, 256, 256, 4, Out::kTransposed, false, false, 32>>("tile 128x256, super-rows of 32, stores .wb"),
      V<Config<128, 128, 128, 8>>("tile 128x128 / 128 thr"),
      V<Config<256, 128, 256, 4>>("tile 256x128 / 256 thr"),
      V<Config<256, 128, 256, 4, Out::kTransposed, false, false>>("tile 256x128 / 256 thr, stores .wb"),
      V<Config<64, 256, 128, 8>>("tile 64x256 / 128 thr"),
      V<Config<128, 256, 512, 2>>("tile 128x256 / 512 thr (one batch)"),
      V<Config<256, 128, 128, 8>>("tile 256x128 / 128 thr (32 rows per thread)"),
  };

  Rig rig{8192, std::vector<uint16_t*>(kBuffers), std::vector<uint8_t*>(kBuffers),
          std::vector<uint8_t*>(kBuffers), nullptr, 0.0, stream};
  const int64_t side = rig.side;
  const int64_t elements = side * side;
  std::vector<uint16_t*> copy(kBuffers);
  for (int i = 0; i < kBuffers; ++i) {
    Check(cudaMalloc(&rig.x[i], elements * 2), "malloc x");
    Fill<<<sms * 8, 256, 0, stream>>>(reinterpret_cast<uint4*>(rig.x[i]), elements / 8,
                                      17u * i + 1u);
    Check(cudaMalloc(&rig.row[i], elements), "malloc row");
    Check(cudaMalloc(&rig.col[i], elements), "malloc col");
    Check(cudaMalloc(&copy[i], elements * 2), "malloc copy");
  }
  Check(cudaMalloc(&rig.amax, sizeof(float)), "malloc amax");
  Check(cudaMemsetAsync(rig.amax, 0, sizeof(float), stream), "memset");
  Check(cudaStreamSynchronize(stream), "fill");
  const double copy_us =
      CopyMicroseconds<kLaunches, kBatches>(rig.x, copy, elements * 2, stream);
  rig.copy_gbps = 4.0 * elements / copy_us * 1e-3;
  std::printf("%lld x %lld bf16 -> e4m3 (%d SMs), buffers rotated over %d\n",
              static_cast<long long>(side), static_cast<long long>(side), sms, kBuffers);
  std::printf("%8.2f us  %6.0f GB/s  100.0%%  cudaMemcpyAsync D2D of x\n", copy_us,
              rig.copy_gbps);
  for (int round = 0; round < 2; ++round) {
    const bool check = round == 0;
    for (const Variant& v : variants) {
      dim3 grid;
      if (v.rows == 0) {
        grid = dim3(static_cast<unsigned>((elements / 8 + 1023) / 1024));
      } else if (v.super > 0) {
        grid = dim3(static_cast<unsigned>((side / v.cols) * (side / v.rows)));
      } else {
        grid = dim3(static_cast<unsigned>(side / v.cols),
                    static_cast<unsigned>(side / v.rows));
      }
      rig.Time(v.name, v.outputs, check && v.check, [&](const Args& a) {
        v.kernel<<<grid, v.threads, 0, stream>>>(a);
      });
    }
    RunPrefetch<128, 256, 256, 3>("persistent 128x256 / 256 thr, next tile's first batch early",
                                  sms, rig, check);
    RunPrefetch<128, 256, 256, 2>("persistent 128x256 / 256 thr at 2 CTAs per SM", sms, rig,
                                  check);
    RunPrefetch<128, 128, 128, 6>("persistent 128x128 / 128 thr", sms, rig, check);
  }
  for (int i = 0; i < kBuffers; ++i) {
    Check(cudaFree(rig.x[i]), "free");
    Check(cudaFree(rig.row[i]), "free");
    Check(cudaFree(rig.col[i]), "free");
    Check(cudaFree(copy[i]), "free");
  }
  Check(cudaFree(rig.amax), "free");
  Check(cudaStreamDestroy(stream), "stream");
  return 0;
}
