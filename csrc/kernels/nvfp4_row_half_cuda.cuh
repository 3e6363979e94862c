// NVFP4 rowwise for 16-bit inputs without stochastic rounding (sm_90a):
// RowHalfKernel, the path of eqx_quant_nvfp4_quantize for bf16 / f16 when
// every row is a whole number of 16-element blocks and the buffers are
// aligned. Included by kernels/nvfp4_quantize_cuda.cu only (which calls
// LaunchRowHalf); same bytes as its RowFastKernel and the CPU kernel.
//
// RowFastKernel unpacks every value to f32 and builds the code word through
// one byte per code; that kernel is bound by the SM's integer pipe (about 185
// instructions per 16-byte vector). Here the values stay packed where they
// can (kernels/nvfp4_quantize_cuda_math.cuh): the block key is a max over
// 16-bit halves (magnitude bits order like the values), the signs go from the
// raw words to the code word in 4 PRMT, and the magnitudes into its nibbles
// with IMAD (the FMA pipe). Per value: the product saturated at 8 (FMUL.SAT of
// |v| and enc / 8, exact unless the global amax is above 6 x 2^123, then
// the unpaired E2M1Magnitude), 3 FFMA, and per pair of values 3
// VIADDMNMX.S16x2 (E2M1MagnitudePair). A lane owns one 16-byte vector (8
// values: a block is 2 adjacent lanes, its key one shuffle) and stores its 4
// code bytes (a warp store: 128 contiguous bytes); 4 vectors per lane and
// step, the loads of the next 3 steps in flight (a cp.async ring). A step
// with a NaN anywhere in the warp takes the unpacked path (NaN-ignoring key,
// the exact encoder) for all its vectors: the same bytes for NaN-free blocks.

#ifndef EQX_QUANT_CSRC_KERNELS_NVFP4_ROW_HALF_CUDA_CUH_
#define EQX_QUANT_CSRC_KERNELS_NVFP4_ROW_HALF_CUDA_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/nvfp4_format.h"
#include "kernels/cuda_sm_count.h"
#include "kernels/nvfp4_quantize_cuda_device.cuh"
#include "kernels/nvfp4_quantize_cuda_math.cuh"

namespace eqx_quant::cuda::nvfp4 {

constexpr int kRowHalfThreads = 256;
constexpr int kRowHalfUnroll = 4;  // 16-byte vectors per lane and step
constexpr int kRowHalfStep = kRowHalfThreads * kRowHalfUnroll;
constexpr int kRowHalfStages = 4;  // ring stages: 3 steps of loads in flight
constexpr int kRowHalfBlocksPerSm = 3;
constexpr size_t kRowHalfRingBytes =
    size_t{kRowHalfStages} * kRowHalfStep * sizeof(uint4);  // 64 KiB

struct RowHalfParams {
  const void* x;
  const float* amax;
  uint8_t* row;        // packed codes: 4 bytes per vector
  uint8_t* row_scale;  // one byte per block (2 vectors)
  int64_t batch;
  int64_t vectors;  // per example: elements / 8 (even)
};

// Vectors of a step in range, 0..kRowHalfStep, from those left from its
// first one.
__device__ __forceinline__ int StepValid(int64_t left) {
  return left >= kRowHalfStep ? kRowHalfStep
                              : (left > 0 ? static_cast<int>(left) : 0);
}

// The lane's vectors of a step (x: the lane's first) into its slots of
// ring stage `slot` (asynchronous, zero-filled out of range), one commit
// group. Each thread copies and reads only its own slots: no barrier.
__device__ __forceinline__ void IssueHalfStep(uint4* ring, int slot,
                                              const uint4* x, int valid) {
#pragma unroll
  for (int u = 0; u < kRowHalfUnroll; ++u) {
    const bool in_range =
        static_cast<int>(threadIdx.x) + u * kRowHalfThreads < valid;
    AsyncCopy16(ring + (slot * kRowHalfUnroll + u) * kRowHalfThreads +
                    threadIdx.x,
                in_range ? x + u * kRowHalfThreads : x, in_range);
  }
  AsyncCommit();
}

// The lane's code word and scale byte of vector u, to out[u * 256] and (even
// lanes) scale[u * 128].
__device__ __forceinline__ void StoreHalfVector(uint32_t* out, uint8_t* scale,
                                                int u, int valid,
                                                uint32_t word, uint32_t sdb) {
  if (static_cast<int>(threadIdx.x) + u * kRowHalfThreads < valid) {
    __stcs(out + u * kRowHalfThreads, word);
    if (threadIdx.x % 2 == 0) {
      scale[u * (kRowHalfThreads / 2)] = static_cast<uint8_t>(sdb);
    }
  }
}

// A step with a NaN in the warp: unpacked values, NaN-ignoring keys, the
// exact encoder (RowFastKernel's NaN path).
template <typename In, bool kScaled>
__device__ __forceinline__ void RowHalfStepWithNan(
    const uint4 (&raw)[kRowHalfUnroll], const float* enc_table, float factor,
    uint32_t* out, uint8_t* scale, int valid) {
#pragma unroll
  for (int u = 0; u < kRowHalfUnroll; ++u) {
    const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
    float v[8];
    Unpack<In, 8>(w, v);
    uint32_t key = NanFreeKey<8>(v);
    key = max(key, __shfl_xor_sync(0xFFFFFFFFu, key, 1));
    const uint32_t sdb = E4M3Byte(MulRn(__uint_as_float(key), factor));
    const float enc = enc_table[sdb & 127u];
    uint32_t q[2];
    EncodeExact<8>(v, kScaled ? MulRn(enc, 8.0f) : enc, q);
    StoreHalfVector(out, scale, u, valid, PackNibbles8(q[0], q[1]), sdb);
  }
}

// One step of a lane: vectors u * 256 (u < 4) from its first (out, scale:
// the lane's code word and block scale of its first vector). kScaled: the
// table holds enc / 8 (exact) and the codes come in pairs from
// MulSatRn(|v|, enc / 8) (CodeWord8Scaled: 3 instead of 6 ALU instructions
// for two values); else the table holds enc (CodeWord8).
template <typename In, bool kScaled>
__device__ __forceinline__ void RowHalfStep(
    const uint4 (&raw)[kRowHalfUnroll], const float* enc_table, float factor,
    uint32_t* out, uint8_t* scale, int valid) {
  using Storage = typename In::Storage;
  float key[kRowHalfUnroll];  // the blocks' max |x| (NaN: a NaN)
  bool has_nan = false;
#pragma unroll
  for (int u = 0; u < kRowHalfUnroll; ++u) {
    const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
    uint32_t m = HalfMagnitudeMax(w);
    m = MaxU16x2(m, __shfl_xor_sync(0xFFFFFFFFu, m, 1));
    key[u] = In::Convert(static_cast<Storage>(FoldHalves(m)));
    has_nan |= __float_as_uint(key[u]) > kF32Inf;
  }
  if (__any_sync(0xFFFFFFFFu, has_nan)) {
    RowHalfStepWithNan<In, kScaled>(raw, enc_table, factor, out, scale,
                                    valid);
    return;
  }
#pragma unroll
  for (int u = 0; u < kRowHalfUnroll; ++u) {
    const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
    const uint32_t sdb = E4M3Byte(MulRn(key[u], factor));
    const float enc = enc_table[sdb & 127u];
    float a[8];
    uint32_t word;
    if constexpr (kScaled) {
#pragma unroll
      for (int e = 0; e < 8; ++e) a[e] = MulSatRn(fabsf(In::Element(w, e)), enc);
      word = CodeWord8Scaled(a, w);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) a[e] = MulRn(fabsf(In::Element(w, e)), enc);
      word = CodeWord8(a, w);
    }
    StoreHalfVector(out, scale, u, valid, word, sdb);
  }
}

// Grid (x: a persistent wave of CTAs, CTA b taking steps b, b + grid, ...;
// y: examples); launched with programmatic dependent launch after the amax
// kernel. The loads run kRowHalfStages - 1 steps ahead of the math through a
// ring of cp.async stages in shared memory (dynamic: kRowHalfRingBytes), so
// that enough bytes are in flight while the SM is busy with the math (with
// the loads one step ahead in registers, or none ahead in short CTAs, the
// kernel took ~50 us at 8192^2 bf16 with neither DRAM nor the SM saturated).
template <typename In>
__global__ void __launch_bounds__(kRowHalfThreads, kRowHalfBlocksPerSm)
    RowHalfKernel(const __grid_constant__ RowHalfParams p) {
  static_assert(In::kVec == 8, "16-bit inputs");
  extern __shared__ uint4 ring[];
  __shared__ float enc_table[128];
  WaitForPrerequisiteGrids();  // the amax kernel (programmatic launch)
  for (int64_t ex = blockIdx.y; ex < p.batch; ex += gridDim.y) {
    const int64_t lane0 = ex * p.vectors + threadIdx.x;
    const uint4* x = static_cast<const uint4*>(p.x) + lane0;
    const int64_t stride = int64_t{gridDim.x} * kRowHalfStep;
    // Steps are issued in order into stages 0, 1, .., kRowHalfStages - 1, 0,
    // ..: `issued` is the first vector of the next one, `slot` its stage.
    int64_t issued = int64_t{blockIdx.x} * kRowHalfStep;
    int slot = 0;
    auto issue = [&]() {
      const int valid = StepValid(p.vectors - issued);
      IssueHalfStep(ring, slot, valid > 0 ? x + issued : x, valid);
      issued += stride;
      slot = slot + 1 == kRowHalfStages ? 0 : slot + 1;
    };
#pragma unroll
    for (int k = 0; k < kRowHalfStages - 1; ++k) issue();
    const Nvfp4TensorScale ts = MakeNvfp4TensorScale(p.amax[ex]);
    // enc / 8 is exact for every scale byte unless the smallest multiplier
    // (scale byte 0x7E, 448) is below 2^-123: a global amax above 6 x 2^123.
    const bool scaled = EighthIsExact(Nvfp4EncodeMultiplier(0x7E, ts));
    __syncthreads();  // the previous example's readers are done
    if (threadIdx.x < 128) {
      const float enc =
          Nvfp4EncodeMultiplier(static_cast<uint8_t>(threadIdx.x), ts);
      enc_table[threadIdx.x] = scaled ? MulRn(enc, 0.125f) : enc;
    }
    __syncthreads();
    uint32_t* out = reinterpret_cast<uint32_t*>(p.row) + lane0;
    uint8_t* scale = p.row_scale + lane0 / 2;
    int current = 0;  // the stage of step `base`
    for (int64_t base = int64_t{blockIdx.x} * kRowHalfStep; base < p.vectors;
         base += stride) {
      issue();
      AsyncWaitGroup<kRowHalfStages - 1>();  // step `base` has landed
      const uint4* stage =
          ring + current * kRowHalfUnroll * kRowHalfThreads + threadIdx.x;
      current = current + 1 == kRowHalfStages ? 0 : current + 1;
      uint4 raw[kRowHalfUnroll];
#pragma unroll
      for (int u = 0; u < kRowHalfUnroll; ++u) {
        raw[u] = stage[u * kRowHalfThreads];
      }
      if (scaled) {
        RowHalfStep<In, true>(raw, enc_table, ts.factor, out + base,
                              scale + base / 2, StepValid(p.vectors - base));
      } else {
        RowHalfStep<In, false>(raw, enc_table, ts.factor, out + base,
                               scale + base / 2, StepValid(p.vectors - base));
      }
    }
    AsyncWaitGroup<0>();  // the zero-filled tail stages, before reuse
  }
}

// Launches RowHalfKernel over `batch` examples of `elements` (a multiple of
// 16) values each: a wave of resident CTAs, grid_y of them per example.
template <typename In>
Nvfp4LaunchStatus LaunchRowHalf(const Nvfp4QuantizeBuffers& buf,
                                int64_t batch, int64_t elements,
                                unsigned grid_y, cudaStream_t stream) {
  const RowHalfParams p{buf.x,         buf.amax, buf.row,
                        buf.row_scale, batch,    elements / In::kVec};
  // On every launch: the attribute is per device.
  const cudaError_t allowed = cudaFuncSetAttribute(
      RowHalfKernel<In>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(kRowHalfRingBytes));
  if (allowed != cudaSuccess) {
    return Nvfp4LaunchStatus{false, static_cast<int>(allowed),
                             "allowing RowHalfKernel its shared memory"};
  }
  static const int per_sm = ResidentBlocks(
      RowHalfKernel<In>, kRowHalfThreads, kRowHalfBlocksPerSm,
      kRowHalfRingBytes);
  const int64_t steps = CeilDiv(p.vectors, int64_t{kRowHalfStep});
  const int64_t room = std::max<int64_t>(1, SmCount() * per_sm / grid_y);
  return LaunchPdl(RowHalfKernel<In>,
                   dim3(GridSize(std::min(steps, room)), grid_y), stream, p,
                   "launching RowHalfKernel", kRowHalfRingBytes);
}

}  // namespace eqx_quant::cuda::nvfp4

#endif  // EQX_QUANT_CSRC_KERNELS_NVFP4_ROW_HALF_CUDA_CUH_
