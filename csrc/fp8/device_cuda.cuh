// Device helpers of the FP8 tensor-scaling CUDA kernels (fp8/quantize_cuda.cu,
// fp8/walk_cuda.cu, fp8/current_cuda.cu, fp8/transpose_cuda.cu,
// fp8/dbias_current_cuda.cu): input element types, the FP8 convert, streaming
// loads, block max and amax publication, programmatic dependent launch, the
// per-example scale, and the staged FP8 tile of the transposed copies.
// Included by .cu files only.
// The float semantics are those stated at the top of fp8/quantize_cuda.cu.

#ifndef EQX_QUANT_CSRC_FP8_DEVICE_CUDA_CUH_
#define EQX_QUANT_CSRC_FP8_DEVICE_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"
#include "cuda/cp_async.cuh"
#include "cuda/fp8_convert.cuh"
#include "cuda/pairwise_tree.cuh"

namespace eqx_quant::cuda::fp8 {

// ---------------------------------------------------------------------------
// Element types.

struct F32Input {
  static constexpr InputType kType = InputType::kF32;
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
  static constexpr InputType kType = InputType::kF16;
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
  static constexpr InputType kType = InputType::kBF16;
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

// 16 rows x 4 columns of bytes (w[k] = the 4 bytes of row k) -> the 4
// columns' 16 bytes each, as 4 words per column.
__device__ __forceinline__ void Transpose16x4(const uint32_t (&w)[16],
                                              uint32_t (&out)[4][4]) {
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
}

using cuda::LoadStreaming;  // the plain one (cuda/fp8_convert.cuh)

// An L2 eviction policy (createpolicy, sm_80+) for the cache_hint accesses
// below: the cooperative current-scaling kernels keep the tiles that their
// second pass re-reads first (`keep`: evict_last) over everything else
// (evict_first). `hinted` false gives evict_normal, the plain accesses'
// priority.
__device__ __forceinline__ uint64_t L2Policy(bool hinted, bool keep) {
  uint64_t last;
  uint64_t first;
  uint64_t normal;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(last));
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(first));
  asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(normal));
  return !hinted ? normal : (keep ? last : first);
}

// LoadStreaming with an L2 eviction policy.
__device__ __forceinline__ uint4 LoadStreaming(const void* p, uint64_t policy) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, "
      "[%4], %5;"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p), "l"(policy));
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

// amax = max(amax, |x|) over the vectors of raw (fmaxf: NaN ignored).
template <typename In, int kCount>
__device__ __forceinline__ float FoldAbsMax(const uint4 (&raw)[kCount],
                                            float amax) {
#pragma unroll
  for (int u = 0; u < kCount; ++u) {
    float v[In::kVec];
    In::Unpack(raw[u], v);
#pragma unroll
    for (int e = 0; e < In::kVec; ++e) amax = fmaxf(amax, fabsf(v[e]));
  }
  return amax;
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

using cuda::PairwiseTree;  // cuda/pairwise_tree.cuh

__device__ __forceinline__ float CanonicalNan(float value) {
  return value != value ? __uint_as_float(0x7FC00000u) : value;
}

// The scale of example b: scale[b], or with current scaling (from_amax) the
// scale of the example's amax, which a previous kernel has finished (waited
// for here), with scale[b] as the fallback.
template <Fp8Format kFormat>
__device__ __forceinline__ float ExampleScale(const float* scale,
                                              const float* amax,
                                              bool from_amax, int64_t b) {
  if (!from_amax) return scale[b];
  WaitForPrerequisiteGrids();
  return ScaleFromAmax(__ldcg(amax + b), scale[b], kFormat);
}

// scale_inv = 1 / scale (IEEE, NaN canonical).
__device__ __forceinline__ float ScaleInverse(float scale) {
  return CanonicalNan(__frcp_rn(scale));
}

// ---------------------------------------------------------------------------
// A tile of FP8 bytes staged in shared memory for its transposed write-out
// (fp8/transpose_cuda.cu, fp8/dbias_current_cuda.cu): kStagedRows rows of
// kCols bytes (128 or 256), written in rows by the cast, read in units of 16
// rows x 4 columns by the write-out.

constexpr int kStagedRows = 128;

template <int kCols>
struct StagedFp8Tile {
  static constexpr int kWords = kCols / 4;  // 4-byte words of a staged row
  static constexpr int kUnits = kWords * (kStagedRows / 16);
  static constexpr int kStagingWords = kStagedRows * kWords;
  // Word index in the staging tile of (tile row, 4-byte word): the 16-row
  // blocks 0..7 of one word go to 8 distinct groups of 4 banks.
  static __device__ __forceinline__ int Staged(int row, int word) {
    return row * kWords + (word ^ (4 * ((row >> 4) & 7)));
  }
  // Write-out unit `unit` (< kUnits) of the tile at (m0, n0) of an example
  // whose transposed copy is col[n][m] (rows bytes per n): 16 word loads, a
  // 4x4 byte transpose per 4 rows, 4 16-byte streaming stores. The 8 units of
  // a 4-column group (neighbouring lanes) write whole 128-byte lines of its 4
  // output rows. kBounded: columns n >= cols are skipped (the tile's rows are
  // all inside the tensor).
  template <bool kBounded>
  static __device__ __forceinline__ void WriteTransposedUnit(
      const uint32_t* staging, int unit, uint8_t* col, int64_t rows,
      int64_t cols, int64_t m0, int64_t n0) {
    const int block = unit % (kStagedRows / 16);
    const int group = unit / (kStagedRows / 16);
    uint32_t w[16];
#pragma unroll
    for (int k = 0; k < 16; ++k) w[k] = staging[Staged(16 * block + k, group)];
    uint32_t out[4][4];
    Transpose16x4(w, out);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t n = n0 + 4 * group + q;
      if (!kBounded || n < cols) {
        StoreStreaming16(col + n * rows + m0 + 16 * block,
                         make_uint4(out[q][0], out[q][1], out[q][2], out[q][3]));
      }
    }
  }
};

}  // namespace eqx_quant::cuda::fp8

#endif  // EQX_QUANT_CSRC_FP8_DEVICE_CUDA_CUH_
