// Probe (not part of the library): does the placement of a streaming cast's
// input and output buffers change its speed on this GPU? The benchmark saw
// the same kernel on the same shapes differ by ~3 us depending on which ops
// ran before it in the process (dense MXFP8 rowwise 52.2 us alone, 55.2 after
// a transposing op; grouped MXFP8 rowwise 58.4 alone, 55.8 in the full run:
// benchmarks/log.md, eighth session), i.e. on where XLA's allocator put
// the buffers. Here one pool is allocated once and the input and output of a
// one-chunk-per-CTA bf16 -> FP8 cast (the shape of the library's
// CastRowwiseKernel / RowStreamKernel: 256 threads x 4 16-byte loads, st.cs
// stores) are placed at chosen offsets inside it.
// Built and run by benchmarks/probes/gpu_placement on the H200 machine (~20 s).
// Prints per placement: microseconds per launch (median of 7 batches of 40
// launches, inputs and outputs rotated over 4 placements shifted by 400 MB so
// that L2 holds none of them) for three CTA orders of the same chunks: plain
// (CTA i takes chunk i), strided (chunk (i % 64) * (chunks / 64) + i / 64:
// CTAs launched together are 2 MiB of input apart) and scattered (chunk
// i * 7919 mod chunks), candidate remedies if the plain order is
// placement-sensitive.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_common.h"

namespace {

using probe::Cast8;
using probe::Check;
using probe::Fill;
using probe::LoadStreaming;
using probe::MedianMicroseconds;
using probe::StoreStreaming8;

constexpr int kLaunches = 40;
constexpr int kBatches = 7;
constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr int kRotation = 4;
constexpr int64_t kRotationStride = int64_t{400} << 20;  // bytes between copies

// One chunk of kThreads x kUnroll vectors per CTA. kOrder 0: CTA i takes
// chunk i; 1: (i % 64) * (chunks / 64) + i / 64 (chunks % 64 == 0 below);
// 2: (i * 7919) mod chunks (7919 is prime, chunks a power of two: a
// permutation).
template <int kOrder>
__global__ void __launch_bounds__(kThreads, 8)
    Cast(const uint4* x, uint2* y, float scale, int64_t chunks) {
  const int64_t i = blockIdx.x;
  const int64_t chunk = kOrder == 0   ? i
                        : kOrder == 1 ? (i % 64) * (chunks / 64) + i / 64
                                      : (i * 7919) % chunks;
  const int64_t base = chunk * kThreads * kUnroll + threadIdx.x;
  uint4 raw[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) raw[u] = LoadStreaming(x + base + u * kThreads);
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) StoreStreaming8(y + base + u * kThreads, Cast8(raw[u], scale));
}

}  // namespace

int main() {
  const int64_t side = 8192;
  const int64_t vectors = side * side / 8;
  const int64_t in_bytes = vectors * 16;  // 128 MiB
  const int64_t chunks = vectors / (kThreads * kUnroll);
  // The pool: kRotation copies of (input window + output window), each window
  // large enough for the largest offset below.
  const int64_t window = in_bytes + (int64_t{64} << 20);
  const int64_t pool_bytes = kRotation * kRotationStride + 2 * window;
  char* pool = nullptr;
  Check(cudaMalloc(&pool, pool_bytes), "malloc pool");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");

  // (input offset, output offset from the end of the input), bytes.
  const int64_t kib = 1024;
  const int64_t mib = kib * kib;
  const std::vector<std::pair<int64_t, int64_t>> placements = {
      {0, 0},        {0, 256},      {0, 4 * kib},   {0, 64 * kib},
      {0, 1 * mib},  {0, 2 * mib},  {0, 3 * mib},   {0, 5 * mib + 768},
      {0, 32 * mib}, {256, 0},      {4 * kib, 0},   {1 * mib, 0},
      {2 * mib, 2 * mib},           {3 * mib + 512, 7 * mib + 4 * kib},
  };
  std::printf("8192 x 8192 bf16 -> e4m3, one chunk per CTA (%lld CTAs), "
              "inputs/outputs rotated over %d copies %lld MiB apart\n",
              static_cast<long long>(chunks), kRotation,
              static_cast<long long>(kRotationStride / mib));
  std::printf("%14s %14s %10s %10s %10s\n", "input offset", "output gap",
              "plain us", "strided us", "scattered us");
  std::vector<double> all[3];
  for (const auto& [in_off, gap] : placements) {
    std::vector<uint4*> x(kRotation);
    std::vector<uint2*> y(kRotation);
    for (int r = 0; r < kRotation; ++r) {
      char* base = pool + r * kRotationStride;
      x[r] = reinterpret_cast<uint4*>(base + in_off);
      y[r] = reinterpret_cast<uint2*>(base + in_off + in_bytes + gap);
      Fill<<<1024, 256, 0, stream>>>(x[r], vectors, 7u * r + 1u);
    }
    Check(cudaStreamSynchronize(stream), "fill");
    void (*kernels[3])(const uint4*, uint2*, float, int64_t) = {&Cast<0>, &Cast<1>,
                                                                &Cast<2>};
    double us[3];
    for (int order = 0; order < 3; ++order) {
      us[order] = MedianMicroseconds<kLaunches, kBatches>(
          [&](int i) {
            const int r = i % kRotation;
            kernels[order]<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(
                x[r], y[r], 3.5f, chunks);
            Check(cudaGetLastError(), "launch");
          },
          stream);
      all[order].push_back(us[order]);
    }
    std::printf("%14lld %14lld %10.2f %10.2f %10.2f\n", static_cast<long long>(in_off),
                static_cast<long long>(gap), us[0], us[1], us[2]);
  }
  const char* names[3] = {"plain", "strided", "scattered"};
  for (int order = 0; order < 3; ++order) {
    std::vector<double> v = all[order];
    std::sort(v.begin(), v.end());
    std::printf("%s: %.2f .. %.2f us (median %.2f)\n", names[order], v.front(), v.back(),
                v[v.size() / 2]);
  }
  Check(cudaFree(pool), "free");
  Check(cudaStreamDestroy(stream), "stream");
  return 0;
}
