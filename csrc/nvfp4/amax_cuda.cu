// CUDA kernels of eqx_quant_nvfp4_amax for sm_90a (H100 / H200).
//
// Semantics: exactly the CPU kernel's (nvfp4/quantize_cpu.h). Per
// example: amax = max |x| with NaN ignored (0 if none); with the RHT also
// rht_amax = max |RHT(x)| over the bf16 outputs of every group of 16
// consecutive k at fixed (a, c, l), NaN ignored. A max of non-negative floats
// is exact (fmaxf ignores NaN and never flushes here: --ftz=false), and the
// bit patterns of non-negative floats order like their values, so the CTA
// maxima meet in one atomicMax per CTA on the uint32 patterns.
//
// Launch sequence (all on the caller's stream, nothing allocated, every launch
// checked):
//   1. InitKernel: amax[b] = rht_amax[b] = 0. It lets its dependents launch
//      at once.
//   2. AmaxKernel (no RHT) or RhtAmaxKernel, launched with programmatic
//      dependent launch so that it overlaps (1); a CTA waits for (1)
//      (griddepcontrol.wait) only right before its atomics.
//      EQX_QUANT_CUDA_PDL=0 turns this off. Both kernels let their own
//      dependents launch at once: the quantize kernels of
//      nvfp4/quantize_cuda.cu / nvfp4/tile_cuda.cu are launched the same way
//      and wait (griddepcontrol.wait: for this grid's completion and memory
//      flush) before they read the amax, so their launch overlaps this one.
//        * AmaxKernel: per example (grid y) a flat grid-stride stream of
//          16-byte loads (4 in flight per thread); the few elements before
//          the first 16-byte boundary and after the last are scalar.
//          Both kernels walk x from its end to its start and the quantize
//          kernels from the start to the end, so that each pass begins on
//          the part of x the previous one left in L2 (x is larger than L2;
//          a max does not depend on the order).
//        * RhtAmaxKernel: a thread owns a 16-row panel of one 8-byte
//          column vector (4 bf16 / f16 or 2 f32 columns; one column with
//          scalar loads when rows are not 8-byte vectors): 16 loads in
//          flight, then per column the RHT butterfly of
//          nvfp4/math_cuda.cuh. It also takes the plain amax.
// No kernel spills (ptxas -warn-spills is on in CMake).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/nvfp4_format.h"
#include "common/nvfp4_problem.h"
#include "common/rht.h"
#include "nvfp4/device_cuda.cuh"
#include "nvfp4/quantize_cuda.h"

namespace eqx_quant::cuda {
namespace {

using namespace nvfp4;  // NOLINT: the device helpers of this op

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;  // AmaxKernel: 16-byte loads in flight per thread
constexpr int kRhtAmaxBlocksPerSm = 4;  // RhtAmaxKernel: <= 64 registers

struct AmaxParams {
  const void* x;
  float* amax;
  float* rht_amax;  // with the RHT
  int64_t batch;
  int64_t elements;  // per example
  // RhtAmaxKernel: rows of W = C * L elements, panels of 16 rows.
  int64_t width;       // W
  int64_t vectors;     // column vectors per panel row: W / kVec, or W
  int64_t items;       // per example: (A * K / 16) * vectors
  bool narrow;         // items < 2^32: 32-bit divisions
  float rht_factor[kRhtSize];  // R[i][0]
};

__global__ void InitKernel(float* amax, float* rht_amax, int64_t batch) {
  AllowDependentGrids();
  for (int64_t b = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; b < batch;
       b += int64_t{gridDim.x} * blockDim.x) {
    amax[b] = 0.0f;
    if (rht_amax != nullptr) rht_amax[b] = 0.0f;
  }
}

// The CTA max of a non-negative float pattern; valid in thread 0.
__device__ __forceinline__ uint32_t BlockMax(uint32_t key, uint32_t* scratch) {
  key = WarpMax(key);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = key;
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll
    for (int w = 1; w < kWarps; ++w) key = max(key, scratch[w]);
  }
  return key;
}

// target = max(target, key) for non-negative float patterns, after (1). Every
// CTA waits for (1), so this grid completes after (1) and a kernel that waits
// for this grid also sees (1)'s zeros.
__device__ __forceinline__ void Publish(float* target, uint32_t key) {
  WaitForPrerequisiteGrids();
  if (key != 0) atomicMax(reinterpret_cast<unsigned int*>(target), key);
}

template <typename In>
__global__ void __launch_bounds__(kThreads)
    AmaxKernel(const __grid_constant__ AmaxParams p) {
  using Storage = typename In::Storage;
  constexpr int kVec = In::kVec;
  __shared__ uint32_t scratch[kWarps];
  AllowDependentGrids();  // the quantize kernel waits for our completion
  for (int64_t ex = blockIdx.y; ex < p.batch; ex += gridDim.y) {
    const Storage* x = static_cast<const Storage*>(p.x) + ex * p.elements;
    // Elements before the first 16-byte boundary (all of them if x is not
    // even element-aligned, which XLA never does).
    const uintptr_t misalignment = reinterpret_cast<uintptr_t>(x) % 16;
    int64_t head = misalignment == 0 ? 0
                   : misalignment % sizeof(Storage) == 0
                       ? static_cast<int64_t>((16 - misalignment) /
                                              sizeof(Storage))
                       : p.elements;
    head = min(head, p.elements);
    const int64_t vectors = (p.elements - head) / kVec;
    const int64_t tail = head + vectors * kVec;
    const uint4* xv = reinterpret_cast<const uint4*>(x + head);

    float m = 0.0f;
    // Chunks of kThreads * kUnroll vectors, the last one first (see above).
    constexpr int64_t kChunk = int64_t{kThreads} * kUnroll;
    const int64_t chunks = (vectors + kChunk - 1) / kChunk;
    for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
      const int64_t base = (chunks - 1 - chunk) * kChunk + threadIdx.x;
      uint4 raw[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = base + u * kThreads;
        raw[u] = j < vectors ? LoadStreaming(xv + j) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
#pragma unroll
        for (int e = 0; e < kVec; ++e) m = fmaxf(m, fabsf(In::Element(w, e)));
      }
    }
    if (blockIdx.x == 0) {  // the scalar head and tail
      const int64_t scalars = head + (p.elements - tail);
      for (int64_t s = threadIdx.x; s < scalars; s += kThreads) {
        const int64_t e = s < head ? s : tail + (s - head);
        m = fmaxf(m, fabsf(In::Convert(x[e])));
      }
    }
    const uint32_t key = BlockMax(__float_as_uint(m), scratch);
    if (threadIdx.x == 0) Publish(p.amax + ex, key);
    __syncthreads();  // scratch is reused by the next example
  }
}

// kVector: a thread's columns are one 8-byte vector of kVec / 2 elements
// (W % (kVec / 2) == 0, x 8-byte aligned); otherwise one column, scalar
// loads. Half a 16-byte vector per item keeps a panel in 32 registers: 4 CTAs
// per SM (16-byte items need 111 registers: 2 CTAs per SM, whose warps
// mostly compute at the same time and leave DRAM idle).
template <typename In, bool kVector>
__global__ void __launch_bounds__(kThreads, kRhtAmaxBlocksPerSm)
    RhtAmaxKernel(const __grid_constant__ AmaxParams p) {
  using Storage = typename In::Storage;
  constexpr int kCols = kVector ? In::kVec / 2 : 1;
  __shared__ uint32_t scratch[kWarps];
  AllowDependentGrids();  // the quantize kernel waits for our completion
  for (int64_t ex = blockIdx.y; ex < p.batch; ex += gridDim.y) {
    const Storage* x = static_cast<const Storage*>(p.x) + ex * p.elements;
    float m = 0.0f;
    float rht_m = 0.0f;
    const int64_t chunks = (p.items + kThreads - 1) / kThreads;
    for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
      // Chunks of kThreads items, the last one first (see above).
      const int64_t item = (chunks - 1 - chunk) * kThreads + threadIdx.x;
      if (item >= p.items) continue;
      int64_t vector;  // panel = a * (K / 16) + k / 16
      const int64_t panel = DivMod(item, p.vectors, p.narrow, vector);
      const int64_t column = vector * kCols;
      // Panel rows are 16 panel .. 16 panel + 15 of the (A * K) x W rows.
      const Storage* src = x + panel * kB * p.width + column;
      if constexpr (kVector) {
        uint32_t w[kB][2];
#pragma unroll
        for (int i = 0; i < kB; ++i) {
          const uint2 r = LoadStreaming8(src + i * p.width);
          w[i][0] = r.x;
          w[i][1] = r.y;
        }
#pragma unroll
        for (int e = 0; e < kCols; ++e) {
          float v[kB];
#pragma unroll
          for (int i = 0; i < kB; ++i) {
            v[i] = In::Element(w[i], e);
            m = fmaxf(m, fabsf(v[i]));
          }
          rht_m = fmaxf(rht_m, RhtAbsMax(v, p.rht_factor));
        }
      } else {
        float v[kB];
#pragma unroll
        for (int i = 0; i < kB; ++i) {
          v[i] = In::Convert(src[i * p.width]);
          m = fmaxf(m, fabsf(v[i]));
        }
        rht_m = fmaxf(rht_m, RhtAbsMax(v, p.rht_factor));
      }
    }
    const uint32_t key = BlockMax(__float_as_uint(m), scratch);
    __syncthreads();  // scratch is reused
    const uint32_t rht_key =
        BlockMax(__float_as_uint(RoundToBf16(rht_m)), scratch);
    if (threadIdx.x == 0) {
      Publish(p.amax + ex, key);
      Publish(p.rht_amax + ex, rht_key);
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------
// Host side.

template <typename In>
Nvfp4LaunchStatus Run(const Nvfp4AmaxProblem& pr, const Nvfp4AmaxBuffers& buf,
                      cudaStream_t stream) {
  const Nvfp4View& v = pr.view;
  AmaxParams p{};
  p.x = buf.x;
  p.amax = buf.amax;
  p.rht_amax = buf.rht_amax;
  p.batch = v.batch;
  p.elements = v.a * v.k * v.c * v.l;
  const unsigned grid_y =
      static_cast<unsigned>(std::min<int64_t>(v.batch, 65535));
  if (!pr.with_rht) {
    static const int per_sm = ResidentBlocks(AmaxKernel<In>, kThreads, 2);
    const int64_t want =
        CeilDiv(p.elements / In::kVec + 1, int64_t{kThreads} * kUnroll);
    const int64_t room = std::max<int64_t>(1, SmCount() * per_sm / grid_y);
    return LaunchPdl(AmaxKernel<In>,
                      dim3(GridSize(std::min(want, room)), grid_y), stream, p,
                      "launching AmaxKernel");
  }
  const RhtMatrix m = MakeRhtMatrix(pr.rht_sign_mask);
  for (int i = 0; i < kRhtSize; ++i) p.rht_factor[i] = m.col[0][i];
  p.width = v.c * v.l;
  const bool vector = p.width % (In::kVec / 2) == 0 && IsAligned(buf.x, 8);
  p.vectors = vector ? p.width / (In::kVec / 2) : p.width;
  p.items = v.a * (v.k / kB) * p.vectors;
  p.narrow = p.items <= 0xFFFFFFFF;
  const int64_t want = CeilDiv(p.items, int64_t{kThreads});
  if (vector) {
    static const int per_sm =
        ResidentBlocks(RhtAmaxKernel<In, true>, kThreads, kRhtAmaxBlocksPerSm);
    const int64_t room = std::max<int64_t>(1, SmCount() * per_sm / grid_y);
    return LaunchPdl(RhtAmaxKernel<In, true>,
                      dim3(GridSize(std::min(want, room)), grid_y), stream, p,
                      "launching RhtAmaxKernel");
  }
  static const int per_sm =
      ResidentBlocks(RhtAmaxKernel<In, false>, kThreads, kRhtAmaxBlocksPerSm);
  const int64_t room = std::max<int64_t>(1, SmCount() * per_sm * 2 / grid_y);
  return LaunchPdl(RhtAmaxKernel<In, false>,
                    dim3(GridSize(std::min(want, room)), grid_y), stream, p,
                    "launching RhtAmaxKernel");
}

}  // namespace

Nvfp4LaunchStatus Nvfp4Amax(const Nvfp4AmaxProblem& problem,
                            const Nvfp4AmaxBuffers& buffers,
                            CUstream_st* stream) {
  const Nvfp4View& v = problem.view;
  if (v.batch <= 0) return Nvfp4LaunchStatus{};
  const int64_t init_blocks = std::min<int64_t>(CeilDiv(v.batch, 256), 1024);
  InitKernel<<<static_cast<unsigned>(init_blocks), 256, 0, stream>>>(
      buffers.amax, problem.with_rht ? buffers.rht_amax : nullptr, v.batch);
  Nvfp4LaunchStatus status = CheckLaunch("launching InitKernel");
  if (!status.ok) return status;
  if (v.a * v.k * v.c * v.l == 0) return status;  // every amax is 0
  switch (v.input_type) {
    case InputType::kF32: return Run<F32In>(problem, buffers, stream);
    case InputType::kF16: return Run<F16In>(problem, buffers, stream);
    case InputType::kBF16: return Run<Bf16In>(problem, buffers, stream);
  }
  return Nvfp4LaunchStatus{false, 0, "unknown input type"};
}

}  // namespace eqx_quant::cuda
