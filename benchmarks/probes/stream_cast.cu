// Probe (not part of the library): how fast a one-pass bf16 -> FP8 e4m3 cast
// with a scale and a block amax can stream on this GPU, by kernel shape, in
// steady state (back-to-back launches, inputs and outputs rotated over more
// than the L2, so that each launch also pays the write-back of the previous
// one's outputs, as in the benchmark). Answers why CastRowwiseKernel's op
// (56.6 us at 8192^2) is ~15% slower than TE's 47.6 us while Nsight Compute
// times the kernel alone at 50.2 us.
// Built and run by benchmarks/probes/gpu_stream_cast on the H200 machine.
// Prints one line per variant: microseconds per launch (median of 7 batches of
// 40 launches), GB/s (x read once, FP8 written once) and % of the D2D copy.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_common.h"

namespace {

using probe::Check;
using probe::Fill;
using probe::MedianMicroseconds;

constexpr int kBuffers = 4;
constexpr int kLaunches = 40;
constexpr int kBatches = 7;

// kHint 0: ld.global.nc.L1::no_allocate (the library's loads); 1: plus
// L2::evict_first; 2: ld.global.cs (streaming).
template <int kHint = 0>
__device__ __forceinline__ uint4 Load(const uint4* p) {
  uint4 v;
  if constexpr (kHint == 0) {
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  } else if constexpr (kHint == 1) {
    uint64_t policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "l"(policy));
  } else {
    asm("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  }
  return v;
}

template <bool kEvictFirst>
__device__ __forceinline__ void Store8(uint2* p, uint2 v) {
  if constexpr (kEvictFirst) {
    asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(v.x), "r"(v.y)
                 : "memory");
  } else {
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(v.x), "r"(v.y)
                 : "memory");
  }
}

template <bool kEvictFirst>
__device__ __forceinline__ void Store16(uint4* p, uint4 v) {
  if constexpr (kEvictFirst) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x),
                 "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  } else {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x),
                 "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  }
}

using probe::CastPair;

// 8 bf16 values -> 8 e4m3 codes (two words), amax updated.
__device__ __forceinline__ uint2 Cast8(uint4 raw, float scale, float& amax) {
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
#pragma unroll
    for (int j = 0; j < 4; ++j) amax = fmaxf(amax, fabsf(v[j]));
    out[k] = CastPair(__fmul_rn(v[0], scale), __fmul_rn(v[1], scale)) |
             (CastPair(__fmul_rn(v[2], scale), __fmul_rn(v[3], scale)) << 16);
  }
  return make_uint2(out[0], out[1]);
}

template <int kThreads>
__device__ __forceinline__ void PublishAmax(float amax, float* out) {
  __shared__ float warp_max[kThreads / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, o));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
    atomicMax(reinterpret_cast<int*>(out), __float_as_int(amax));
  }
}

struct Args {
  const uint4* x;  // 8 bf16 per vector
  uint2* y;        // 8 codes per vector
  float* amax;
  float scale;
  int64_t vectors;
};

// Grid-stride (kPersistent: one wave, loop) or one chunk per block; kUnroll
// vectors per thread per step; kPipelined: the next step's loads are issued
// before this step is cast.
template <int kThreads, int kUnroll, bool kPipelined, bool kEvictFirst, int kMinBlocks,
          int kLoadHint = 0>
__global__ void __launch_bounds__(kThreads, kMinBlocks) Stream(const Args a) {
  constexpr int64_t kStep = int64_t{kThreads} * kUnroll;
  const int64_t stride = int64_t{gridDim.x} * kStep;
  float amax = 0.0f;
  int64_t base = int64_t{blockIdx.x} * kStep;
  uint4 raw[kUnroll];
  auto load = [&](int64_t at) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = at + u * kThreads + threadIdx.x;
      if (i < a.vectors) raw[u] = Load<kLoadHint>(a.x + i);
    }
  };
  if constexpr (kPipelined) {
    if (base < a.vectors) load(base);
    for (; base < a.vectors; base += stride) {
      uint4 cur[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) cur[u] = raw[u];
      if (base + stride < a.vectors) load(base + stride);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + u * kThreads + threadIdx.x;
        if (i < a.vectors) Store8<kEvictFirst>(a.y + i, Cast8(cur[u], a.scale, amax));
      }
    }
  } else {
    for (; base < a.vectors; base += stride) {
      load(base);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + u * kThreads + threadIdx.x;
        if (i < a.vectors) Store8<kEvictFirst>(a.y + i, Cast8(raw[u], a.scale, amax));
      }
    }
  }
  PublishAmax<kThreads>(amax, a.amax);
}

// Each thread two adjacent vectors (32 bytes in), one 16-byte store out.
template <int kThreads, int kUnroll, bool kEvictFirst, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) Wide(const Args a) {
  constexpr int64_t kStep = int64_t{kThreads} * kUnroll;  // pairs
  const int64_t pairs = a.vectors / 2;
  const int64_t stride = int64_t{gridDim.x} * kStep;
  float amax = 0.0f;
  for (int64_t base = int64_t{blockIdx.x} * kStep; base < pairs; base += stride) {
    uint4 raw[kUnroll][2];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * kThreads + threadIdx.x;
      if (i < pairs) {
        raw[u][0] = Load(a.x + 2 * i);
        raw[u][1] = Load(a.x + 2 * i + 1);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * kThreads + threadIdx.x;
      if (i < pairs) {
        const uint2 lo = Cast8(raw[u][0], a.scale, amax);
        const uint2 hi = Cast8(raw[u][1], a.scale, amax);
        Store16<kEvictFirst>(reinterpret_cast<uint4*>(a.y) + i,
                             make_uint4(lo.x, lo.y, hi.x, hi.y));
      }
    }
  }
  PublishAmax<kThreads>(amax, a.amax);
}

template <bool kEvictFirst>
__global__ void CopyKernel(const uint4* x, uint4* y, int64_t vectors) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < vectors;
       i += int64_t{gridDim.x} * blockDim.x) {
    Store16<kEvictFirst>(y + i, Load(x + i));
  }
}

struct Variant {
  const char* name;
  void (*kernel)(Args);
  int threads;
  int vectors_per_thread_step;  // vectors one thread takes per step
  int blocks_per_sm;            // 0: one chunk per block (no loop)
};

}  // namespace

int main(int argc, char** argv) {
  // Output buffers rotated over (argv[1], default 4): 32 gives every launch
  // fresh output memory, as the benchmark's 32 ops per jitted call do.
  const int out_buffers = argc > 1 ? std::atoi(argv[1]) : kBuffers;
  int sms = 0;
  Check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sms");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const Variant variants[] = {
      {"grid-stride 256 thr x4, 8/SM (CastRowwiseKernel)", &Stream<256, 4, false, false, 8>, 256, 4, 8},
      {"grid-stride 256 thr x4, 8/SM, st.cs", &Stream<256, 4, false, true, 8>, 256, 4, 8},
      {"grid-stride 256 thr x4, 8/SM, st.cs, ld L2::evict_first", &Stream<256, 4, false, true, 8, 1>, 256, 4, 8},
      {"grid-stride 256 thr x4, 8/SM, st.cs, ld.cs", &Stream<256, 4, false, true, 8, 2>, 256, 4, 8},
      {"grid-stride 512 thr x4, 4/SM, st.cs", &Stream<512, 4, false, true, 4>, 512, 4, 4},
      {"one chunk/block 256 thr x4, st.cs", &Stream<256, 4, false, true, 8>, 256, 4, 0},
      {"grid-stride 256 thr x2, 8/SM, pipelined", &Stream<256, 2, true, false, 8>, 256, 2, 8},
      {"grid-stride 256 thr x4, 4/SM, pipelined", &Stream<256, 4, true, false, 4>, 256, 4, 4},
      {"grid-stride 256 thr x8, 4/SM", &Stream<256, 8, false, false, 4>, 256, 8, 4},
      {"grid-stride 512 thr x4, 4/SM", &Stream<512, 4, false, false, 4>, 512, 4, 4},
      {"grid-stride 256 thr x2, 8/SM", &Stream<256, 2, false, false, 8>, 256, 2, 8},
      {"grid-stride 256 thr x4, 4/SM", &Stream<256, 4, false, false, 4>, 256, 4, 4},
      {"one chunk/block 256 thr x4", &Stream<256, 4, false, false, 8>, 256, 4, 0},
      {"one chunk/block 256 thr x2", &Stream<256, 2, false, false, 8>, 256, 2, 0},
      {"one chunk/block 128 thr x4", &Stream<128, 4, false, false, 16>, 128, 4, 0},
      {"one chunk/block 512 thr x1", &Stream<512, 1, false, false, 4>, 512, 1, 0},
      {"wide 32B/16B 256 thr x2, 8/SM", &Wide<256, 2, false, 8>, 256, 4, 8},
      {"wide 32B/16B 256 thr x2, 8/SM, st.cs", &Wide<256, 2, true, 8>, 256, 4, 8},
      {"wide 32B/16B 256 thr x4, 4/SM", &Wide<256, 4, false, 4>, 256, 8, 4},
      {"wide 32B/16B 256 thr x2, one chunk/block", &Wide<256, 2, false, 8>, 256, 4, 0},
  };
  for (const int64_t side : {int64_t{8192}, int64_t{4096}}) {
    const int64_t elements = side * side;
    const int64_t vectors = elements / 8;
    std::vector<uint4*> x(kBuffers);
    std::vector<uint2*> y(out_buffers);
    std::vector<uint4*> copy(out_buffers);
    for (int i = 0; i < kBuffers; ++i) {
      Check(cudaMalloc(&x[i], vectors * 16), "malloc x");
      Fill<<<sms * 8, 256, 0, stream>>>(x[i], vectors, 17u * i + 1u);
    }
    for (int i = 0; i < out_buffers; ++i) {
      Check(cudaMalloc(&y[i], vectors * 8), "malloc y");
      Check(cudaMalloc(&copy[i], vectors * 16), "malloc copy");
    }
    float* amax = nullptr;
    Check(cudaMalloc(&amax, sizeof(float)), "malloc amax");
    Check(cudaStreamSynchronize(stream), "fill");
    const double cast_bytes = 3.0 * elements;   // 2 read + 1 written
    const double copy_bytes = 4.0 * elements;   // bf16 read + written
    const double copy_us =
        probe::CopyMicroseconds<kLaunches, kBatches>(x, copy, vectors * 16, stream);
    const double copy_gbps = copy_bytes / copy_us * 1e-3;
    std::printf("\n%lld x %lld bf16 (%d SMs), outputs rotated over %d buffers\n",
                static_cast<long long>(side), static_cast<long long>(side), sms,
                out_buffers);
    std::printf("%8.2f us  %6.0f GB/s  100.0%%  cudaMemcpyAsync D2D of x\n", copy_us,
                copy_gbps);
    for (const bool evict_first : {false, true}) {
      const double kcopy_us = MedianMicroseconds<kLaunches, kBatches>(
          [&](int i) {
            auto* kernel = evict_first ? &CopyKernel<true> : &CopyKernel<false>;
            kernel<<<sms * 8, 256, 0, stream>>>(x[(i + 1) % kBuffers], copy[i % out_buffers],
                                                vectors);
          },
          stream);
      std::printf("%8.2f us  %6.0f GB/s  %5.1f%%  copy kernel, 16-byte, grid-stride 8/SM%s\n",
                  kcopy_us, copy_bytes / kcopy_us * 1e-3,
                  100.0 * copy_bytes / kcopy_us * 1e-3 / copy_gbps,
                  evict_first ? ", st.cs" : "");
    }
    for (const Variant& v : variants) {
      Args a{};
      a.amax = amax;
      a.scale = 3.5f;
      a.vectors = vectors;
      const int64_t step = int64_t{v.threads} * v.vectors_per_thread_step;
      const int64_t chunks = (vectors + step - 1) / step;
      const int64_t grid =
          v.blocks_per_sm == 0 ? chunks : std::min<int64_t>(chunks, int64_t{sms} * v.blocks_per_sm);
      const double us = MedianMicroseconds<kLaunches, kBatches>(
          [&](int i) {
            a.x = x[(i + 1) % kBuffers];
            a.y = y[i % out_buffers];
            v.kernel<<<static_cast<unsigned>(grid), v.threads, 0, stream>>>(a);
            Check(cudaGetLastError(), v.name);
          },
          stream);
      std::printf("%8.2f us  %6.0f GB/s  %5.1f%%  %s (grid %lld)\n", us,
                  cast_bytes / us * 1e-3, 100.0 * cast_bytes / us * 1e-3 / copy_gbps,
                  v.name, static_cast<long long>(grid));
    }
    for (int i = 0; i < kBuffers; ++i) Check(cudaFree(x[i]), "free");
    for (int i = 0; i < out_buffers; ++i) {
      Check(cudaFree(y[i]), "free");
      Check(cudaFree(copy[i]), "free");
    }
    Check(cudaFree(amax), "free");
  }
  Check(cudaStreamDestroy(stream), "stream");
  return 0;
}
