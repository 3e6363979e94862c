// NVFP4 rowwise for 16-bit inputs without stochastic rounding (sm_90a):
// RowHalfKernel, the path of eqx_quant_nvfp4_quantize for bf16 / f16 when
// every row is a whole number of 16-element blocks and the buffers are
// aligned. Included by nvfp4/quantize_cuda.cu only (which calls
// LaunchRowHalf); same bytes as its RowFastKernel and the CPU kernel.
//
// RowFastKernel unpacks every value to f32 and builds the code word through
// one byte per code; that kernel is bound by the SM's integer pipe (about 185
// instructions per 16-byte vector). Here the values stay packed where they
// can (nvfp4/math_cuda.cuh): the block key is a max over 16-bit halves
// (magnitude bits order like the values), the signs go from the raw words to
// the code word in 4 PRMT, and the magnitudes into its nibbles with IMAD (the
// FMA pipe). Per value: the product saturated at 8 (FMUL.SAT of
// |v| and enc / 8, exact unless the global amax is above 6 x 2^123, then
// the unpaired E2M1Magnitude), 3 FFMA, and per pair of values 3
// VIADDMNMX.S16x2 (E2M1MagnitudePair). A lane owns one 16-byte vector (8
// values: a block is 2 adjacent lanes, its key one shuffle) and stores its 4
// code bytes (a warp store: 128 contiguous bytes); 4 vectors per lane and
// step, the loads of the next 2 steps in flight (a cp.async ring). A step
// with a NaN anywhere in the warp takes the unpacked path (NaN-ignoring key,
// the exact encoder) for all its vectors: the same bytes for NaN-free blocks.
//
// The loop control is 32-bit step counts and running pointers, and only the
// example's last step (if partial) checks ranges (a sixth fewer instructions
// per step); with that, 4 CTAs per SM (64 registers, a 3-stage ring of
// 48 KiB) beat 3 (80 registers, 4 stages).

#ifndef EQX_QUANT_CSRC_NVFP4_ROW_HALF_CUDA_CUH_
#define EQX_QUANT_CSRC_NVFP4_ROW_HALF_CUDA_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/nvfp4_format.h"
#include "cuda/sm_count.h"
#include "nvfp4/device_cuda.cuh"
#include "nvfp4/half_codes_cuda.cuh"
#include "nvfp4/math_cuda.cuh"

namespace eqx_quant::cuda::nvfp4 {

constexpr int kRowHalfThreads = 256;
constexpr int kRowHalfUnroll = 4;  // 16-byte vectors per lane and step
constexpr int kRowHalfStep = kRowHalfThreads * kRowHalfUnroll;
constexpr int kRowHalfStages = 3;  // ring stages: 2 steps of loads in flight
constexpr int kRowHalfBlocksPerSm = 4;  // 64 registers
constexpr size_t kRowHalfRingBytes =
    size_t{kRowHalfStages} * kRowHalfStep * sizeof(uint4);  // 48 KiB

struct RowHalfParams {
  const void* x;
  const float* amax;
  uint8_t* row;        // packed codes: 4 bytes per vector
  uint8_t* row_scale;  // one byte per block (2 vectors)
  int64_t batch;
  int64_t vectors;  // per example: elements / 8 (even)
  int steps;        // per example: ceil(vectors / kRowHalfStep)
  int whole_steps;  // per example: vectors / kRowHalfStep
};

// Steps of this CTA in an example of `steps` (its steps are blockIdx.x,
// blockIdx.x + gridDim.x, ...).
__device__ __forceinline__ int CtaSteps(int steps) {
  const int first = static_cast<int>(blockIdx.x);
  return first < steps ? (steps - 1 - first) / static_cast<int>(gridDim.x) + 1
                       : 0;
}

// The lane's code word and scale byte of vector u, to out[u * 256] and (even
// lanes) scale[u * 128]; kWhole: every vector of the step is in range, else
// those below `valid`.
template <bool kWhole>
__device__ __forceinline__ void StoreHalfVector(uint32_t* out, uint8_t* scale,
                                                bool even, int u, int valid,
                                                uint32_t word, uint32_t sdb) {
  if (kWhole || static_cast<int>(threadIdx.x) + u * kRowHalfThreads < valid) {
    __stcs(out + u * kRowHalfThreads, word);
    if (even) scale[u * (kRowHalfThreads / 2)] = static_cast<uint8_t>(sdb);
  }
}

// A step with a NaN in the warp: unpacked values, NaN-ignoring keys, the
// exact encoder (RowFastKernel's NaN path).
template <typename In, bool kScaled, bool kWhole>
__device__ __forceinline__ void RowHalfStepWithNan(
    const uint4 (&raw)[kRowHalfUnroll], const float* enc_table, float factor,
    uint32_t* out, uint8_t* scale, bool even, int valid) {
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
    StoreHalfVector<kWhole>(out, scale, even, u, valid, PackNibbles8(q[0], q[1]),
                            sdb);
  }
}

// One step of a lane: vectors u * 256 (u < 4) from its first (out, scale:
// the lane's code word and block scale of its first vector). kScaled: the
// table holds enc / 8 (exact) and the codes come in pairs from
// MulSatRn(|v|, enc / 8) (CodeWord8Scaled: 3 instead of 6 ALU instructions
// for two values); else the table holds enc (CodeWord8).
template <typename In, bool kScaled, bool kWhole>
__device__ __forceinline__ void RowHalfStep(
    const uint4 (&raw)[kRowHalfUnroll], const float* enc_table, float factor,
    uint32_t* out, uint8_t* scale, bool even, int valid) {
  float key[kRowHalfUnroll];  // the blocks' max |x| (NaN: a NaN)
  bool has_nan = false;
#pragma unroll
  for (int u = 0; u < kRowHalfUnroll; ++u) {
    const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
    key[u] = HalfPairKey<In>(w);
    has_nan |= __float_as_uint(key[u]) > kF32Inf;
  }
  if (__any_sync(0xFFFFFFFFu, has_nan)) {
    RowHalfStepWithNan<In, kScaled, kWhole>(raw, enc_table, factor, out, scale,
                                            even, valid);
    return;
  }
#pragma unroll
  for (int u = 0; u < kRowHalfUnroll; ++u) {
    const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
    const uint32_t sdb = E4M3Byte(MulRn(key[u], factor));
    const float enc = enc_table[sdb & 127u];
    StoreHalfVector<kWhole>(out, scale, even, u, valid,
                            HalfCodeWord8<In, kScaled>(w, enc), sdb);
  }
}

// A lane's first vector, code word and scale byte in example `ex`.
struct RowHalfLane {
  const uint4* x;
  uint32_t* out;
  uint8_t* scale;
};

__device__ __forceinline__ RowHalfLane RowHalfLaneOf(const RowHalfParams& p,
                                                     int64_t ex) {
  const int64_t lane0 = ex * p.vectors + threadIdx.x;
  return RowHalfLane{static_cast<const uint4*>(p.x) + lane0,
                     reinterpret_cast<uint32_t*>(p.row) + lane0,
                     p.row_scale + lane0 / 2};
}

// One example's steps of this CTA (x, out, scale: the example's vectors,
// code words and scale bytes, at this lane's first one). The loads run
// kRowHalfStages - 1 steps ahead of the math through the ring. The loop
// control is 32-bit and branch-free except for two uniform branches: only
// the example's last step can be partial (its vectors past the end are
// zero-filled, their stores skipped), and only that step checks ranges.
// Each step's math is step(whole, raw, out, scale, even, valid, vector):
// `whole` a std::bool_constant (every vector in range, else those of lane
// index + u * kRowHalfThreads below `valid`), out and scale at the lane's
// first vector of the step, `vector` its index in the example.
template <typename Step>
__device__ __forceinline__ void RowHalfExample(const RowHalfParams& p,
                                               uint4* ring, const uint4* x,
                                               uint32_t* out, uint8_t* scale,
                                               Step step) {
  constexpr int kStageVectors = kRowHalfUnroll * kRowHalfThreads;
  const int steps = CtaSteps(p.steps);
  const int whole = CtaSteps(p.whole_steps);
  const int64_t stride = int64_t{gridDim.x} * kRowHalfStep;
  const int64_t first = int64_t{blockIdx.x} * kRowHalfStep;
  const bool even = threadIdx.x % 2 == 0;
  // Vectors of the partial step in range (it is the example's last).
  const int tail_valid =
      static_cast<int>(p.vectors - int64_t{p.whole_steps} * kRowHalfStep);
  uint4* lane_ring = ring + threadIdx.x;
  const uint4* src = x + first;  // the next step to issue
  // Step i of this CTA into stage i % kRowHalfStages (an empty commit group past
  // the CTA's steps, so that every wait counts the same groups).
  auto issue = [&](int i) {
    uint4* dst = lane_ring + (i % kRowHalfStages) * kStageVectors;
    if (i < whole) {
#pragma unroll
      for (int u = 0; u < kRowHalfUnroll; ++u) {
        AsyncCopy16(dst + u * kRowHalfThreads, src + u * kRowHalfThreads,
                    true);
      }
    } else if (i < steps) {
#pragma unroll
      for (int u = 0; u < kRowHalfUnroll; ++u) {
        const bool in_range =
            static_cast<int>(threadIdx.x) + u * kRowHalfThreads < tail_valid;
        AsyncCopy16(dst + u * kRowHalfThreads,
                    in_range ? src + u * kRowHalfThreads : x, in_range);
      }
    }
    AsyncCommit();
    src += stride;
  };
#pragma unroll
  for (int i = 0; i < kRowHalfStages - 1; ++i) issue(i);
  out += first;
  scale += first / 2;
  int64_t vector = first + threadIdx.x;
  for (int i = 0; i < steps; ++i) {
    issue(i + kRowHalfStages - 1);
    AsyncWaitGroup<kRowHalfStages - 1>();  // step i has landed
    const uint4* stage = lane_ring + (i % kRowHalfStages) * kStageVectors;
    uint4 raw[kRowHalfUnroll];
#pragma unroll
    for (int u = 0; u < kRowHalfUnroll; ++u) raw[u] = stage[u * kRowHalfThreads];
    if (i < whole) {
      step(std::true_type{}, raw, out, scale, even, kRowHalfStep, vector);
    } else {
      step(std::false_type{}, raw, out, scale, even, tail_valid, vector);
    }
    out += stride;
    scale += stride / 2;
    vector += stride;
  }
  AsyncWaitGroup<0>();  // the empty tail groups, before the ring is reused
}

// Grid (x: a persistent wave of CTAs, CTA b taking steps b, b + grid, ...;
// y: examples); launched with programmatic dependent launch after the amax
// kernel. The loads run kRowHalfStages - 1 steps ahead of the math through a
// ring of cp.async stages in shared memory (dynamic: kRowHalfRingBytes), so
// that enough bytes are in flight while the SM is busy with the math (with
// the loads one step ahead in registers, or none ahead in short CTAs,
// neither DRAM nor the SM is saturated).
// Each thread copies and reads only its own slots of the ring: no barrier.
template <typename In>
__global__ void __launch_bounds__(kRowHalfThreads, kRowHalfBlocksPerSm)
    RowHalfKernel(const __grid_constant__ RowHalfParams p) {
  static_assert(In::kVec == 8, "16-bit inputs");
  extern __shared__ uint4 ring[];
  __shared__ float enc_table[128];
  WaitForPrerequisiteGrids();  // the amax kernel (programmatic launch)
  for (int64_t ex = blockIdx.y; ex < p.batch; ex += gridDim.y) {
    const RowHalfLane lane = RowHalfLaneOf(p, ex);
    const Nvfp4TensorScale ts = MakeNvfp4TensorScale(p.amax[ex]);
    // enc / 8 is exact for every scale byte unless the smallest multiplier
    // is below 2^-123 (kSmallestMultiplierByte).
    const bool scaled =
        EighthIsExact(Nvfp4EncodeMultiplier(kSmallestMultiplierByte, ts));
    FillEncodeTable(enc_table, ts, scaled);
    const float factor = ts.factor;
    auto run = [&](auto scaled_tag) {  // std::bool_constant of `scaled`
      RowHalfExample(p, ring, lane.x, lane.out, lane.scale,
                     [&](auto whole, const uint4 (&raw)[kRowHalfUnroll],
                         uint32_t* o, uint8_t* s, bool even, int valid,
                         int64_t) {
                       RowHalfStep<In, decltype(scaled_tag)::value,
                                   decltype(whole)::value>(
                           raw, enc_table, factor, o, s, even, valid);
                     });
    };
    if (scaled) {
      run(std::true_type{});
    } else {
      run(std::false_type{});
    }
  }
}

// The step counts of `batch` examples of `elements` (a multiple of 16)
// 16-bit values each, into `p` (its buffers from `buf`).
inline Nvfp4LaunchStatus MakeRowHalfParams(const Nvfp4QuantizeBuffers& buf,
                                           int64_t batch, int64_t elements,
                                           RowHalfParams& p) {
  const int64_t vectors = elements / 8;
  const int64_t steps = CeilDiv(vectors, int64_t{kRowHalfStep});
  // Step indices are 32-bit: 2^31 steps would be 2^46 bytes of x.
  if (steps > 0x7FFFFFFF) {
    return Nvfp4LaunchStatus{false, 0, "the 16-bit row kernels: x too large"};
  }
  p = RowHalfParams{buf.x,
                    buf.amax,
                    buf.row,
                    buf.row_scale,
                    batch,
                    vectors,
                    static_cast<int>(steps),
                    static_cast<int>(vectors / kRowHalfStep)};
  return Nvfp4LaunchStatus{};
}

// The x size of a grid whose CTAs run at most `steps_per_cta` of `steps`
// (0: no limit, one wave) where `per_sm` of its CTAs fit on an SM and grid_y
// CTAs share each x position.
inline int64_t RowHalfGridX(int64_t steps, int per_sm, int steps_per_cta,
                            unsigned grid_y) {
  const int64_t room = std::max<int64_t>(1, SmCount() * per_sm / grid_y);
  if (steps_per_cta == 0) return std::min(steps, room);
  // Fewer steps per CTA where the limit would leave resident slots empty
  // (a small input still fills one wave).
  const int64_t per_cta = std::clamp<int64_t>(CeilDiv(steps, room), 1,
                                              steps_per_cta);
  return CeilDiv(steps, per_cta);
}

// Allows `kernel` its ring and launches it on a grid_x x grid_y grid (`what`:
// the kernel's name in the errors).
template <typename Kernel, typename Params>
Nvfp4LaunchStatus LaunchRowHalfGrid(Kernel kernel, const Params& p,
                                    int64_t grid_x, unsigned grid_y,
                                    const char* allow_what,
                                    const char* launch_what,
                                    cudaStream_t stream) {
  // On every launch: the attribute is per device.
  const cudaError_t allowed =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kRowHalfRingBytes));
  if (allowed != cudaSuccess) {
    return Nvfp4LaunchStatus{false, static_cast<int>(allowed), allow_what};
  }
  return LaunchPdl(kernel, dim3(GridSize(grid_x), grid_y), stream, p,
                   launch_what, kRowHalfRingBytes);
}

// Launches RowHalfKernel over `batch` examples of `elements` (a multiple of
// 16) values each: a wave of resident CTAs, grid_y of them per example.
template <typename In>
Nvfp4LaunchStatus LaunchRowHalf(const Nvfp4QuantizeBuffers& buf,
                                int64_t batch, int64_t elements,
                                unsigned grid_y, cudaStream_t stream) {
  RowHalfParams p{};
  const Nvfp4LaunchStatus made = MakeRowHalfParams(buf, batch, elements, p);
  if (!made.ok) return made;
  static const int per_sm = ResidentBlocks(
      RowHalfKernel<In>, kRowHalfThreads, kRowHalfBlocksPerSm,
      kRowHalfRingBytes);
  return LaunchRowHalfGrid(RowHalfKernel<In>, p,
                           RowHalfGridX(p.steps, per_sm, 0, grid_y), grid_y,
                           "allowing RowHalfKernel its shared memory",
                           "launching RowHalfKernel", stream);
}

}  // namespace eqx_quant::cuda::nvfp4

#endif  // EQX_QUANT_CSRC_NVFP4_ROW_HALF_CUDA_CUH_
