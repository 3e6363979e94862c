// One thread per 8 consecutive elements of the (A, L, B) view: one 8-byte
// load of payloads where the 8 lie inside the buffer, and StoreEight. Where
// the 8 share one scale (B = 1, one 32-block) it is read once, where they lie
// along B their 8 consecutive scales; elsewhere each element walks the view.

#include <cuda_runtime.h>

#include <cstdint>

#include "common/mx_decode.h"
#include "cuda/store_values_cuda.cuh"
#include "mxfp8/dequantize_cuda.h"

namespace eqx_quant::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;
constexpr int64_t kBlock = 32;

struct Walk {  // an element's (a, l, b) position, stepped in linear order
  int64_t a, l, b;
};

template <typename Format, bool kF32>
__global__ void __launch_bounds__(kThreads) Decode(Mxfp8DequantizeProblem p) {
  const int64_t total = p.a * p.l * p.b;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kVec;
  if (first >= total) return;
  const int64_t blocks = (p.l + kBlock - 1) / kBlock;
  Walk w;
  w.b = first % p.b;
  const int64_t rest = first / p.b;
  w.l = rest % p.l;
  w.a = rest / p.l;
  const int count = total - first < kVec ? static_cast<int>(total - first) : kVec;
  uint8_t bytes[kVec];
  if (count == kVec) {
    const uint2 packed = *reinterpret_cast<const uint2*>(p.data + first);
    memcpy(bytes, &packed, sizeof(packed));
  } else {
    for (int t = 0; t < kVec; ++t) bytes[t] = t < count ? p.data[first + t] : 0;
  }
  float values[kVec] = {};
  const int64_t at = (w.a * blocks + w.l / kBlock) * p.b + w.b;
  if (count == kVec && p.b == 1 && w.l % kBlock + kVec <= kBlock && w.l + kVec <= p.l) {
    // Blocks along the contiguous dim: the 8 share one scale.
    const float scale = E8m0Value(p.scales[at]);
    for (int t = 0; t < kVec; ++t) values[t] = Fp8Value<Format>(bytes[t]) * scale;
  } else if (count == kVec && w.b + kVec <= p.b) {
    // Blocks across the contiguous dim: 8 consecutive scales.
    for (int t = 0; t < kVec; ++t) {
      values[t] = Fp8Value<Format>(bytes[t]) * E8m0Value(p.scales[at + t]);
    }
  } else {
    for (int t = 0; t < kVec; ++t) {
      if (t < count) {
        const int64_t here = (w.a * blocks + w.l / kBlock) * p.b + w.b;
        values[t] = Fp8Value<Format>(bytes[t]) * E8m0Value(p.scales[here]);
        if (++w.b == p.b) {
          w.b = 0;
          if (++w.l == p.l) {
            w.l = 0;
            ++w.a;
          }
        }
      }
    }
  }
  StoreEight<kF32>(p.out, first, values, count);
}

template <typename Format>
void Launch(const Mxfp8DequantizeProblem& p, unsigned ctas, cudaStream_t stream) {
  if (p.out_f32) {
    Decode<Format, true><<<ctas, kThreads, 0, stream>>>(p);
  } else {
    Decode<Format, false><<<ctas, kThreads, 0, stream>>>(p);
  }
}

}  // namespace

int Mxfp8Dequantize(const Mxfp8DequantizeProblem& p, CUstream_st* stream) {
  const int64_t total = p.a * p.l * p.b;
  if (total == 0) return 0;
  const int64_t per_cta = static_cast<int64_t>(kThreads) * kVec;
  const int64_t ctas = (total + per_cta - 1) / per_cta;
  if (ctas > 0x7FFFFFFF) return static_cast<int>(cudaErrorInvalidConfiguration);
  if (p.format == Fp8Format::kE4M3Fn) {
    Launch<E4M3Fn>(p, static_cast<unsigned>(ctas), stream);
  } else {
    Launch<E5M2>(p, static_cast<unsigned>(ctas), stream);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace eqx_quant::cuda
