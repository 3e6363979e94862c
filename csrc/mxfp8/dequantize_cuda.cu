// Two kernels.
//
// OctetKernel (bfloat16 values of a rowwise part with L % 8 == 0, or of a
// colwise part with B % 8 == 0, fewer than 2^31 octets): the part as a flat
// run of octets (8 consecutive elements, inside one row of the view), each
// thread kIter octets kThreads apart, so that a warp's 8-byte loads and
// 16-byte stores are contiguous; every load is issued before the first
// decode. An octet's scales: rowwise, one byte (its row from a multiply-high
// by a host-made magic number, no division); colwise, its 8 consecutive scale
// bytes in one 8-byte load. Decoded exactly with integer operations
// (cuda/mx_octet_decode.cuh).
//
// Decode (everything else: float32 values, odd views): one thread per 8
// consecutive elements of the (A, L, B) view: one 8-byte load of payloads
// where the 8 lie inside the buffer, and StoreEight. Where the 8 share one
// scale (B = 1, one 32-block) it is read once, where they lie along B their 8
// consecutive scales; elsewhere each element walks the view.

#include <cuda_runtime.h>

#include <cstdint>

#include "common/magic_division.h"
#include "common/mx_decode.h"
#include "cuda/mx_octet_decode.cuh"
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

constexpr int kIter = 4;  // octets per thread

struct OctetParams {
  const uint8_t* data;
  const uint8_t* scales;
  uint16_t* out;
  uint32_t octets;       // A * L * B / 8 < 2^31
  uint32_t row_octets;   // octets per row of the view: L / 8 (rowwise), B / 8 (colwise)
  MagicDivisor row_div;  // by row_octets
  uint32_t length;       // L (colwise)
  MagicDivisor length_div;
  uint32_t blocks;       // ceil(L / 32)
  uint32_t b;            // B (colwise)
};

// kColwise: the view is (A, L, B) with B % 8 == 0 and the octet's 8 elements
// along B; else (A, L, 1) with L % 8 == 0 and the 8 along L, in one block.
template <typename Format, bool kColwise>
__global__ void __launch_bounds__(kThreads) OctetKernel(const __grid_constant__ OctetParams p) {
  uint2 raw[kIter];
  uint2 scale[kIter];
  uint32_t octet[kIter];
#pragma unroll
  for (int it = 0; it < kIter; ++it) {
    octet[it] = (blockIdx.x * kIter + it) * kThreads + threadIdx.x;
    raw[it] = make_uint2(0, 0);
    scale[it] = make_uint2(0, 0);
    if (octet[it] < p.octets) {
      const uint32_t q = octet[it];
      raw[it] = __ldg(reinterpret_cast<const uint2*>(p.data) + q);
      const uint32_t row = MagicQuotient(q, p.row_div);  // of the (A L, ...) view
      const uint32_t within = q - row * p.row_octets;
      if constexpr (kColwise) {
        const uint32_t a = MagicQuotient(row, p.length_div);
        const uint32_t l = row - a * p.length;
        const int64_t at = (int64_t{a} * p.blocks + l / 32) * p.b + int64_t{within} * 8;
        scale[it] = __ldg(reinterpret_cast<const uint2*>(p.scales + at));
      } else {
        scale[it].x = __ldg(p.scales + int64_t{row} * p.blocks + within / 4);
      }
    }
  }
#pragma unroll
  for (int it = 0; it < kIter; ++it) {
    if (octet[it] >= p.octets) continue;
    const uint4 bits =
        kColwise ? DecodeOctetScales<Format>(raw[it].x, raw[it].y, scale[it].x, scale[it].y)
                 : DecodeOctet<Format>(raw[it].x, raw[it].y, scale[it].x);
    reinterpret_cast<uint4*>(p.out)[octet[it]] = bits;
  }
}

// Whether OctetKernel takes the problem; fills `params` if so.
bool OctetView(const Mxfp8DequantizeProblem& p, OctetParams* params) {
  const int64_t total = p.a * p.l * p.b;
  const bool colwise = p.b > 1;
  if (p.out_f32 || total / 8 >= (int64_t{1} << 31) || p.a * p.l >= (int64_t{1} << 31)) {
    return false;
  }
  if (colwise ? p.b % 8 != 0 : p.l % 8 != 0) return false;
  if (reinterpret_cast<uintptr_t>(p.data) % 8 != 0 ||
      reinterpret_cast<uintptr_t>(p.out) % 16 != 0 ||
      (colwise && reinterpret_cast<uintptr_t>(p.scales) % 8 != 0)) {
    return false;
  }
  OctetParams& o = *params;
  o.data = p.data;
  o.scales = p.scales;
  o.out = static_cast<uint16_t*>(p.out);
  o.octets = static_cast<uint32_t>(total / 8);
  o.row_octets = static_cast<uint32_t>(colwise ? p.b / 8 : p.l / 8);
  o.row_div = MakeMagicDivisor(o.row_octets);
  o.length = static_cast<uint32_t>(p.l);
  o.length_div = MakeMagicDivisor(o.length);
  o.blocks = static_cast<uint32_t>((p.l + kBlock - 1) / kBlock);
  o.b = static_cast<uint32_t>(p.b);
  return true;
}

template <typename Format>
void LaunchOctets(const OctetParams& o, bool colwise, cudaStream_t stream) {
  const int64_t per_cta = int64_t{kThreads} * kIter;
  const auto ctas = static_cast<unsigned>((int64_t{o.octets} + per_cta - 1) / per_cta);
  if (colwise) {
    OctetKernel<Format, true><<<ctas, kThreads, 0, stream>>>(o);
  } else {
    OctetKernel<Format, false><<<ctas, kThreads, 0, stream>>>(o);
  }
}

template <typename Format>
void Launch(const Mxfp8DequantizeProblem& p, unsigned ctas, cudaStream_t stream) {
  OctetParams o{};
  if (OctetView(p, &o)) {
    LaunchOctets<Format>(o, p.b > 1, stream);
    return;
  }
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
