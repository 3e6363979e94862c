// Probe (not part of the library): how fast a one-pass bf16 -> FP8 cast that
// writes TWO outputs (one read stream, two write streams, as the rowwise +
// colwise / transposed ops do) can stream on this GPU, next to the same cast
// with one output and to cudaMemcpy, in steady state (back-to-back launches,
// inputs and outputs rotated over more than the L2). Answers whether the
// rowwise + colwise kernels' ~88% of the copy bandwidth
// (benchmarks/log.md, ninth session) is a limit of the access pattern
// or of the kernels.
// Built and run by benchmarks/probes/gpu_two_outputs on the H200 machine.
// Prints one line per variant: microseconds per launch (median of 7 batches of
// 40 launches), GB/s (x read once, every output written once) and % of the
// D2D copy.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_common.h"

namespace {

using probe::Cast8;
using probe::Check;
using probe::CopyMicroseconds;
using probe::Fill;
using probe::LoadStreaming;
using probe::MedianMicroseconds;
using probe::StoreStreaming16;
using probe::StoreStreaming8;

constexpr int kBuffers = 4;
constexpr int kLaunches = 40;
constexpr int kBatches = 7;
constexpr int kThreads = 256;

struct Args {
  const uint4* x;  // 8 bf16 per vector
  uint2* y;        // 8 codes per vector
  uint2* z;        // the second output (kOutputs == 2)
  int64_t vectors;
};

// One chunk of kThreads x kUnroll vectors per block, all loads first; each
// vector cast into kOutputs outputs (scales 3.5 and 0.75), 8-byte stores.
// kSecondFar: the second output's chunk is the mirror image of the first's
// (z[vectors - 1 - i]): two write streams far apart, as a transposed or
// colwise copy written from another part of the tensor.
template <int kUnroll, int kOutputs, bool kSecondFar>
__global__ void __launch_bounds__(kThreads) Cast(const Args a) {
  const int64_t base = int64_t{blockIdx.x} * kThreads * kUnroll + threadIdx.x;
  uint4 raw[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < a.vectors) raw[u] = LoadStreaming(a.x + i);
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < a.vectors) {
      StoreStreaming8(a.y + i, Cast8(raw[u], 3.5f));
      if constexpr (kOutputs == 2) {
        const int64_t j = kSecondFar ? a.vectors - 1 - i : i;
        StoreStreaming8(a.z + j, Cast8(raw[u], 0.75f));
      }
    }
  }
}

// Each thread two adjacent vectors (32 bytes in), 16-byte stores out.
template <int kUnroll, int kOutputs>
__global__ void __launch_bounds__(kThreads) Wide(const Args a) {
  const int64_t pairs = a.vectors / 2;
  const int64_t base = int64_t{blockIdx.x} * kThreads * kUnroll + threadIdx.x;
  uint4 raw[kUnroll][2];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < pairs) {
      raw[u][0] = LoadStreaming(a.x + 2 * i);
      raw[u][1] = LoadStreaming(a.x + 2 * i + 1);
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < pairs) {
      const uint2 lo = Cast8(raw[u][0], 3.5f);
      const uint2 hi = Cast8(raw[u][1], 3.5f);
      StoreStreaming16(reinterpret_cast<uint4*>(a.y) + i, make_uint4(lo.x, lo.y, hi.x, hi.y));
      if constexpr (kOutputs == 2) {
        const uint2 lo2 = Cast8(raw[u][0], 0.75f);
        const uint2 hi2 = Cast8(raw[u][1], 0.75f);
        StoreStreaming16(reinterpret_cast<uint4*>(a.z) + i, make_uint4(lo2.x, lo2.y, hi2.x, hi2.y));
      }
    }
  }
}

struct Variant {
  const char* name;
  void (*kernel)(Args);
  int vectors_per_block;
  int outputs;
};

}  // namespace

int main() {
  int sms = 0;
  Check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sms");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const Variant variants[] = {
      {"1 output, 256 thr x4 (the best one-output shape)", &Cast<4, 1, false>, 1024, 1},
      {"2 outputs, 256 thr x4", &Cast<4, 2, false>, 1024, 2},
      {"2 outputs, 256 thr x2", &Cast<2, 2, false>, 512, 2},
      {"2 outputs, 256 thr x8", &Cast<8, 2, false>, 2048, 2},
      {"2 outputs, second mirrored, 256 thr x4", &Cast<4, 2, true>, 1024, 2},
      {"1 output, wide 32B/16B 256 thr x2", &Wide<2, 1>, 1024, 1},
      {"2 outputs, wide 32B/16B 256 thr x2", &Wide<2, 2>, 1024, 2},
      {"2 outputs, wide 32B/16B 256 thr x4", &Wide<4, 2>, 2048, 2},
  };
  for (const int64_t side : {int64_t{8192}}) {
    const int64_t elements = side * side;
    const int64_t vectors = elements / 8;
    std::vector<uint4*> x(kBuffers);
    std::vector<uint2*> y(kBuffers);
    std::vector<uint2*> z(kBuffers);
    std::vector<uint4*> copy(kBuffers);
    for (int i = 0; i < kBuffers; ++i) {
      Check(cudaMalloc(&x[i], vectors * 16), "malloc x");
      Fill<<<sms * 8, 256, 0, stream>>>(x[i], vectors, 17u * i + 1u);
      Check(cudaMalloc(&y[i], vectors * 8), "malloc y");
      Check(cudaMalloc(&z[i], vectors * 8), "malloc z");
      Check(cudaMalloc(&copy[i], vectors * 16), "malloc copy");
    }
    Check(cudaStreamSynchronize(stream), "fill");
    const double copy_bytes = 4.0 * elements;  // bf16 read + written
    const double copy_us =
        CopyMicroseconds<kLaunches, kBatches>(x, copy, vectors * 16, stream);
    const double copy_gbps = copy_bytes / copy_us * 1e-3;
    std::printf("%lld x %lld bf16 (%d SMs), inputs and outputs rotated over %d buffers\n",
                static_cast<long long>(side), static_cast<long long>(side), sms, kBuffers);
    std::printf("%8.2f us  %6.0f GB/s  100.0%%  cudaMemcpyAsync D2D of x\n", copy_us,
                copy_gbps);
    for (const Variant& v : variants) {
      Args a{};
      a.vectors = vectors;
      const int64_t grid = (vectors + v.vectors_per_block - 1) / v.vectors_per_block;
      const double us = MedianMicroseconds<kLaunches, kBatches>(
          [&](int i) {
            a.x = x[(i + 1) % kBuffers];
            a.y = y[i % kBuffers];
            a.z = z[(i + 2) % kBuffers];
            v.kernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(a);
            Check(cudaGetLastError(), v.name);
          },
          stream);
      const double bytes = (2.0 + v.outputs) * elements;
      std::printf("%8.2f us  %6.0f GB/s  %5.1f%%  %s (grid %lld)\n", us, bytes / us * 1e-3,
                  100.0 * bytes / us * 1e-3 / copy_gbps, v.name, static_cast<long long>(grid));
    }
    for (int i = 0; i < kBuffers; ++i) {
      Check(cudaFree(x[i]), "free");
      Check(cudaFree(y[i]), "free");
      Check(cudaFree(z[i]), "free");
      Check(cudaFree(copy[i]), "free");
    }
  }
  Check(cudaStreamDestroy(stream), "stream");
  return 0;
}
