// Probe (not part of the library): how fast a one-pass bf16 -> FP8 cast that
// writes TWO outputs (one read stream, two write streams, as the rowwise +
// colwise / transposed ops do) can stream on this GPU, next to the same cast
// with one output and to cudaMemcpy, in steady state (back-to-back launches,
// inputs and outputs rotated over more than the L2). Answers whether the
// rowwise + colwise kernels' ~88% of the copy bandwidth (docs/performance.md,
// ninth session) is a limit of the access pattern or of the kernels.
// Built and run by .ci/gpu_two_outputs on the H200 machine.
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

using probe::Check;
using probe::Fill;
using probe::MedianMicroseconds;

constexpr int kBuffers = 4;
constexpr int kLaunches = 40;
constexpr int kBatches = 7;
constexpr int kThreads = 256;

__device__ __forceinline__ uint4 Load(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ void Store8(uint2* p, uint2 v) {
  asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(v.x), "r"(v.y));
}

__device__ __forceinline__ void Store16(uint4* p, uint4 v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x),
               "r"(v.y), "r"(v.z), "r"(v.w));
}

__device__ __forceinline__ uint32_t CastPair(float a, float b) {
  uint16_t q;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(q) : "f"(b), "f"(a));
  return q;
}

// 8 bf16 values x scale -> 8 e4m3 codes (two words).
__device__ __forceinline__ uint2 Cast8(uint4 raw, float scale) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t out[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    float v[4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      v[2 * j] = __uint_as_float(w[2 * k + j] << 16);
      v[2 * j + 1] = __uint_as_float(w[2 * k + j] & 0xFFFF0000u);
    }
    out[k] = CastPair(__fmul_rn(v[0], scale), __fmul_rn(v[1], scale)) |
             (CastPair(__fmul_rn(v[2], scale), __fmul_rn(v[3], scale)) << 16);
  }
  return make_uint2(out[0], out[1]);
}

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
    if (i < a.vectors) raw[u] = Load(a.x + i);
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < a.vectors) {
      Store8(a.y + i, Cast8(raw[u], 3.5f));
      if constexpr (kOutputs == 2) {
        const int64_t j = kSecondFar ? a.vectors - 1 - i : i;
        Store8(a.z + j, Cast8(raw[u], 0.75f));
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
      raw[u][0] = Load(a.x + 2 * i);
      raw[u][1] = Load(a.x + 2 * i + 1);
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < pairs) {
      const uint2 lo = Cast8(raw[u][0], 3.5f);
      const uint2 hi = Cast8(raw[u][1], 3.5f);
      Store16(reinterpret_cast<uint4*>(a.y) + i, make_uint4(lo.x, lo.y, hi.x, hi.y));
      if constexpr (kOutputs == 2) {
        const uint2 lo2 = Cast8(raw[u][0], 0.75f);
        const uint2 hi2 = Cast8(raw[u][1], 0.75f);
        Store16(reinterpret_cast<uint4*>(a.z) + i, make_uint4(lo2.x, lo2.y, hi2.x, hi2.y));
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
    const double copy_us = MedianMicroseconds<kLaunches, kBatches>(
        [&](int i) {
          Check(cudaMemcpyAsync(copy[i % kBuffers], x[(i + 1) % kBuffers], vectors * 16,
                                cudaMemcpyDeviceToDevice, stream),
                "memcpy");
        },
        stream);
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
