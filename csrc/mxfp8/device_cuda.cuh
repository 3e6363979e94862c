// Device helpers of the MXFP8 CUDA kernels (mxfp8/quantize_cuda.cu):
// the input element types, NaN-ignoring amax keys, the block scale and the
// FP8 conversion. Included by that file only (everything is internal).
//
// Amax keys are the magnitude bits of |x| in the input's own encoding (two
// 16-bit keys per 32-bit word for bf16 / f16), NaN above kInfKey. For
// non-negative numbers the integer order of the bit patterns is the numeric
// order, subnormals included, so the max key is the key of the NaN-ignoring
// max |x| with no flush-to-zero question, and KeyToFloat is exact. This is
// the CPU kernel's AmaxKey, in the input's encoding.

#ifndef EQX_QUANT_CSRC_MXFP8_DEVICE_CUDA_CUH_
#define EQX_QUANT_CSRC_MXFP8_DEVICE_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/e8m0.h"
#include "common/fp8_format.h"
#include "cuda/cp_async.cuh"
#include "cuda/fp8_convert.cuh"

namespace eqx_quant::cuda::mxfp8 {

__device__ __forceinline__ float HalfToFloat(uint32_t bits16) {
  float value;  // cvt.f32.f16 is exact, subnormals included
  asm("cvt.f32.f16 %0, %1;"
      : "=f"(value)
      : "h"(static_cast<uint16_t>(bits16)));
  return value;
}

// Element e (0..kVec-1) of a 16-byte vector held as 4 words, as f32.
struct F32In {
  using Storage = float;
  static constexpr int kVec = 4;  // elements per 16 bytes
  static constexpr int kKeysPerWord = 1;
  static constexpr uint32_t kMagnitude = 0x7FFFFFFFu;
  static constexpr uint32_t kInfKey = 0x7F800000u;
  static __device__ __forceinline__ float Scalar(const float* p) { return *p; }
  static __device__ __forceinline__ float Element(const uint32_t (&w)[4],
                                                  int e) {
    return __uint_as_float(w[e]);
  }
  static __device__ __forceinline__ float KeyToFloat(uint32_t key) {
    return __uint_as_float(key);
  }
};

struct Bf16In {
  using Storage = uint16_t;
  static constexpr int kVec = 8;
  static constexpr int kKeysPerWord = 2;
  static constexpr uint32_t kMagnitude = 0x7FFF7FFFu;
  static constexpr uint32_t kInfKey = 0x7F80u;
  static __device__ __forceinline__ float Scalar(const uint16_t* p) {
    return __uint_as_float(static_cast<uint32_t>(*p) << 16);
  }
  static __device__ __forceinline__ float Element(const uint32_t (&w)[4],
                                                  int e) {
    return __uint_as_float(e % 2 ? w[e / 2] & 0xFFFF0000u : w[e / 2] << 16);
  }
  static __device__ __forceinline__ float KeyToFloat(uint32_t key) {
    return __uint_as_float(key << 16);
  }
};

struct F16In {
  using Storage = uint16_t;
  static constexpr int kVec = 8;
  static constexpr int kKeysPerWord = 2;
  static constexpr uint32_t kMagnitude = 0x7FFF7FFFu;
  static constexpr uint32_t kInfKey = 0x7C00u;
  static __device__ __forceinline__ float Scalar(const uint16_t* p) {
    return HalfToFloat(*p);
  }
  static __device__ __forceinline__ float Element(const uint32_t (&w)[4],
                                                  int e) {
    return HalfToFloat(e % 2 ? w[e / 2] >> 16 : w[e / 2] & 0xFFFFu);
  }
  static __device__ __forceinline__ float KeyToFloat(uint32_t key) {
    return HalfToFloat(key);
  }
};

// Per key: max(a, b).
template <typename In>
__device__ __forceinline__ uint32_t KeyMax(uint32_t a, uint32_t b) {
  if constexpr (In::kKeysPerWord == 2) {
    return __vmaxu2(a, b);
  } else {
    return a > b ? a : b;
  }
}

template <typename In>
__device__ __forceinline__ bool KeyHasNan(uint32_t w) {
  if constexpr (In::kKeysPerWord == 2) {
    return (w & 0xFFFFu) > In::kInfKey || (w >> 16) > In::kInfKey;
  } else {
    return w > In::kInfKey;
  }
}

// Per key: NaN -> 0.
template <typename In>
__device__ __forceinline__ uint32_t KeyDropNan(uint32_t w) {
  if constexpr (In::kKeysPerWord == 2) {
    const uint32_t lo = (w & 0xFFFFu) > In::kInfKey ? 0u : (w & 0xFFFFu);
    const uint32_t hi = (w >> 16) > In::kInfKey ? 0u : (w >> 16);
    return lo | (hi << 16);
  } else {
    return w > In::kInfKey ? 0u : w;
  }
}

// The per-key NaN-ignoring max of the key words of kWords raw words
// (w[i * stride], so that one function serves a vector and a column).
template <typename In, int kWords>
__device__ __forceinline__ uint32_t KeyWordMax(const uint32_t* w, int stride) {
  uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < kWords; ++i) {
    m = KeyMax<In>(m, w[i * stride] & In::kMagnitude);
  }
  if (KeyHasNan<In>(m)) {  // rare: again with the NaNs dropped
    m = 0;
#pragma unroll
    for (int i = 0; i < kWords; ++i) {
      m = KeyMax<In>(m, KeyDropNan<In>(w[i * stride] & In::kMagnitude));
    }
  }
  return m;
}

// The larger key of a word of per-key maxima (16-bit keys: of its halves).
template <typename In>
__device__ __forceinline__ uint32_t WordKey(uint32_t m) {
  if constexpr (In::kKeysPerWord == 2) return max(m & 0xFFFFu, m >> 16);
  return m;
}

// The NaN-ignoring max key of the kVec elements of one 16-byte vector.
template <typename In>
__device__ __forceinline__ uint32_t VectorKey(const uint32_t (&w)[4]) {
  return WordKey<In>(KeyWordMax<In, 4>(w, 1));
}

// Magnitude bits of an f32 with NaN -> 0 (the CPU kernel's AmaxKey).
__device__ __forceinline__ uint32_t F32Key(float value) {
  const uint32_t m = __float_as_uint(value) & 0x7FFFFFFFu;
  return m > 0x7F800000u ? 0u : m;
}

// The E8M0 byte (in a 32-bit value) of a block whose amax is not NaN and
// not negative (every caller's amax is built from magnitude keys with NaN
// dropped): Mxfp8BlockScale (common/e8m0.h, the CPU kernel's) with the short
// round-up form E8m0RoundUpNonNegative, equal on every such amax.
template <Fp8Format kFormat>
__device__ __forceinline__ uint32_t BlockScale(float amax) {
  if constexpr (kFormat == Fp8Format::kE4M3Fn) {
    return E8m0RoundUpNonNegative(amax * Fp8MaxReciprocal<E4M3Fn>::kValue);
  } else {
    return E8m0RoundUpNonNegative(amax * Fp8MaxReciprocal<E5M2>::kValue);
  }
}

// 2^(127-E) of a BlockScale byte (never the NaN byte 0xFF).
__device__ __forceinline__ float BlockFactor(uint32_t e) {
  return E8m0ReciprocalScaleNotNan(e);
}


// The kVec elements of one vector times factor[e] (kUniform: factor[0]) ->
// kVec FP8 bytes, little-endian in kVec/4 words. Exact IEEE products
// (__fmul_rn, never contracted; subnormal results kept: --ftz=false).
template <typename In, Fp8Format kFormat, bool kUniform>
__device__ __forceinline__ void QuantizeVector(const uint32_t (&w)[4],
                                               const float* factor,
                                               uint32_t (&q)[In::kVec / 4]) {
#pragma unroll
  for (int i = 0; i < In::kVec / 4; ++i) {
    float y[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      y[e] = __fmul_rn(In::Element(w, 4 * i + e),
                       factor[kUniform ? 0 : 4 * i + e]);
    }
    q[i] = CvtPair<kFormat>(y[0], y[1]) |
           (CvtPair<kFormat>(y[2], y[3]) << 16);
  }
}

// One block of `count` (<= 32) elements at `stride`, scalar loads: writes
// its FP8 bytes and returns its scale byte (the scalar kernels).
template <typename In, Fp8Format kFormat>
__device__ __forceinline__ uint8_t QuantizeBlockScalar(
    const typename In::Storage* x, uint8_t* out, int64_t stride, int count) {
  float v[32];
  uint32_t key = 0;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    v[i] = i < count ? In::Scalar(x + i * stride) : 0.0f;
    key = max(key, F32Key(v[i]));
  }
  const uint32_t e = BlockScale<kFormat>(__uint_as_float(key));
  const float factor = BlockFactor(e);
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    if (i < count) {
      const float y = __fmul_rn(v[i], factor);
      out[i * stride] = static_cast<uint8_t>(CvtPair<kFormat>(y, 0.0f));
    }
  }
  return e;
}

// The colwise tile kernels (dense TileKernel, grouped UnitTileKernel): a
// thread holds one 16-byte vector of kRows rows of a 32-row block.

// The thread's kRows vectors from its warp's slots in shared memory
// ([row u][lane][4 words]).
template <int kRows>
__device__ __forceinline__ void ReadSlotVectors(
    const uint32_t (&slots)[kRows][32][4], int lane, uint32_t (&w)[kRows][4]) {
#pragma unroll
  for (int u = 0; u < kRows; ++u) {
    const uint4 v = *reinterpret_cast<const uint4*>(slots[u][lane]);
    w[u][0] = v.x;
    w[u][1] = v.y;
    w[u][2] = v.z;
    w[u][3] = v.w;
  }
}

// The thread's keys of a tile (its kRows vectors): row_keys[u], the
// NaN-ignoring max key of vector u (VectorKey), and the per-key maxima over
// the kRows vectors, word j of the vector in component j (its part of the
// column maxima, for the CTA's reduction through shared memory). One NaN test
// for all of them: only a thread that holds a NaN folds again with the NaN
// keys dropped (dropping is the identity on the other keys, so the results
// are those of VectorKey and KeyWordMax).
template <typename In, int kRows>
__device__ __forceinline__ uint4 TileKeys(const uint32_t (&w)[kRows][4],
                                          uint32_t (&row_keys)[kRows]) {
  uint32_t row_words[kRows];
  uint32_t col_words[4];
  auto fold = [&](auto key_of) {
#pragma unroll
    for (int j = 0; j < 4; ++j) col_words[j] = 0;
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      row_words[u] = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t k = key_of(w[u][j]);
        row_words[u] = KeyMax<In>(row_words[u], k);
        col_words[j] = KeyMax<In>(col_words[j], k);
      }
    }
  };
  fold([](uint32_t word) { return word & In::kMagnitude; });
  const uint32_t all = KeyMax<In>(KeyMax<In>(col_words[0], col_words[1]),
                                  KeyMax<In>(col_words[2], col_words[3]));
  if (KeyHasNan<In>(all)) {  // rare: again with the NaNs dropped
    fold([](uint32_t word) { return KeyDropNan<In>(word & In::kMagnitude); });
  }
#pragma unroll
  for (int u = 0; u < kRows; ++u) row_keys[u] = WordKey<In>(row_words[u]);
  return make_uint4(col_words[0], col_words[1], col_words[2], col_words[3]);
}

// The kVec column factors of a lane's columns (shared memory, 16-byte
// aligned), by 16-byte loads.
template <int kVec>
__device__ __forceinline__ void LoadColumnFactors(const float* factors,
                                                  float (&f)[kVec]) {
#pragma unroll
  for (int e = 0; e < kVec; e += 4) {
    const float4 four = *reinterpret_cast<const float4*>(factors + e);
    f[e] = four.x;
    f[e + 1] = four.y;
    f[e + 2] = four.z;
    f[e + 3] = four.w;
  }
}

}  // namespace eqx_quant::cuda::mxfp8

#endif  // EQX_QUANT_CSRC_MXFP8_DEVICE_CUDA_CUH_
