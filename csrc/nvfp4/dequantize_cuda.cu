// Two kernels.
//
// OctetKernel (bfloat16 values, L % 16 == 0, fewer than 2^31 octets): the
// tensor as a flat run of octets (8 codes of one 16-block: 4 bytes), each
// thread kIter octets kThreads apart, so that a warp's loads and 16-byte
// stores are contiguous, every load issued before the first decode. An
// octet's scale byte is number octet / 2 (the scales are (A, L / 16)), its
// decode scale that of example octet / (octets per example), a multiply-high
// by a host-made magic number. The values: (E2M1 x scale) x decode scale in
// float32, then bfloat16 bits, the reference's arithmetic.
//
// Decode (everything else): one thread per 8 consecutive elements: where the
// 8 share a row and a 16-block (all of them when L is a multiple of 8), one
// 4-byte load of packed codes, one scale and one decode scale, and
// StoreEight; elsewhere (a row's tail, the buffer's end) element by element.

#include <cuda_runtime.h>

#include <cstdint>

#include "common/magic_division.h"
#include "common/mx_decode.h"
#include "cuda/store_values_cuda.cuh"
#include "common/nvfp4_format.h"
#include "nvfp4/dequantize_cuda.h"

namespace eqx_quant::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;
constexpr int64_t kBlock = 16;

template <bool kF32>
__global__ void __launch_bounds__(kThreads) Decode(Nvfp4DequantizeProblem p) {
  const int64_t total = p.rows * p.cols;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kVec;
  if (first >= total) return;
  const int64_t blocks = (p.cols + kBlock - 1) / kBlock;
  const int64_t rows_per_example = p.rows / p.examples;
  int64_t r = first / p.cols;
  int64_t c = first - r * p.cols;
  const int count = total - first < kVec ? static_cast<int>(total - first) : kVec;
  float values[kVec] = {};
  if (count == kVec && c % kBlock + kVec <= kBlock && c + kVec <= p.cols) {
    // The 8 share a row and a 16-block (every chunk when L is a multiple of 8):
    // one scale, one decode scale.
    const uint32_t packed = *reinterpret_cast<const uint32_t*>(p.codes + first / 2);
    const float scale = E4M3ToFloat(p.scales[r * blocks + c / kBlock]);
    const float decode = p.decode_scales[r / rows_per_example];
    for (int t = 0; t < kVec; ++t) {
      values[t] = (E2M1ToFloat((packed >> (4 * t)) & 0xFu) * scale) * decode;
    }
    StoreEight<kF32>(p.out, first, values, count);
    return;
  }
  for (int t = 0; t < kVec; ++t) {
    if (t < count) {
      const int64_t i = first + t;
      const uint32_t code = (p.codes[i / 2] >> (4 * (i % 2))) & 0xFu;
      const float scale = E4M3ToFloat(p.scales[r * blocks + c / kBlock]);
      const float decode = p.decode_scales[r / rows_per_example];
      values[t] = (E2M1ToFloat(code) * scale) * decode;
      if (++c == p.cols) {
        c = 0;
        ++r;
      }
    }
  }
  StoreEight<kF32>(p.out, first, values, count);
}

constexpr int kIter = 4;  // octets per thread

struct OctetParams {
  const uint32_t* codes;  // 8 codes per word
  const uint8_t* scales;
  const float* decode_scales;
  uint4* out;                  // 8 bfloat16 values per vector
  uint32_t octets;             // A * L / 8 < 2^31
  MagicDivisor example_div;    // by the octets of an example
};

__global__ void __launch_bounds__(kThreads) OctetKernel(const __grid_constant__ OctetParams p) {
  uint32_t packed[kIter];
  uint32_t scale[kIter];
  float decode[kIter];
  uint32_t octet[kIter];
#pragma unroll
  for (int it = 0; it < kIter; ++it) {
    octet[it] = (blockIdx.x * kIter + it) * kThreads + threadIdx.x;
    packed[it] = 0;
    scale[it] = 0;
    decode[it] = 0.0f;
    if (octet[it] < p.octets) {
      packed[it] = __ldg(p.codes + octet[it]);
      scale[it] = __ldg(p.scales + octet[it] / 2);
      decode[it] = __ldg(p.decode_scales + MagicQuotient(octet[it], p.example_div));
    }
  }
#pragma unroll
  for (int it = 0; it < kIter; ++it) {
    if (octet[it] >= p.octets) continue;
    const float s = E4M3ToFloat(static_cast<uint8_t>(scale[it]));
    uint32_t words[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float a = (E2M1ToFloat((packed[it] >> (8 * w)) & 0xFu) * s) * decode[it];
      const float b = (E2M1ToFloat((packed[it] >> (8 * w + 4)) & 0xFu) * s) * decode[it];
      words[w] = ToBf16Bits(a) | (static_cast<uint32_t>(ToBf16Bits(b)) << 16);
    }
    p.out[octet[it]] = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

// Whether OctetKernel takes the problem; fills `params` if so.
bool OctetView(const Nvfp4DequantizeProblem& p, OctetParams* params) {
  const int64_t total = p.rows * p.cols;
  if (p.out_f32 || p.cols % kBlock != 0 || total / 8 >= (int64_t{1} << 31) ||
      reinterpret_cast<uintptr_t>(p.codes) % 4 != 0 ||
      reinterpret_cast<uintptr_t>(p.out) % 16 != 0) {
    return false;
  }
  params->codes = reinterpret_cast<const uint32_t*>(p.codes);
  params->scales = p.scales;
  params->decode_scales = p.decode_scales;
  params->out = static_cast<uint4*>(p.out);
  params->octets = static_cast<uint32_t>(total / 8);
  params->example_div =
      MakeMagicDivisor(static_cast<uint32_t>(p.rows / p.examples * p.cols / 8));
  return true;
}

}  // namespace

int Nvfp4Dequantize(const Nvfp4DequantizeProblem& p, CUstream_st* stream) {
  const int64_t total = p.rows * p.cols;
  if (total == 0) return 0;
  const int64_t per_cta = static_cast<int64_t>(kThreads) * kVec;
  const int64_t ctas = (total + per_cta - 1) / per_cta;
  if (ctas > 0x7FFFFFFF) return static_cast<int>(cudaErrorInvalidConfiguration);
  OctetParams o{};
  if (OctetView(p, &o)) {
    const int64_t per_octet_cta = int64_t{kThreads} * kIter;
    OctetKernel<<<static_cast<unsigned>((int64_t{o.octets} + per_octet_cta - 1) / per_octet_cta),
                  kThreads, 0, stream>>>(o);
  } else if (p.out_f32) {
    Decode<true><<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(p);
  } else {
    Decode<false><<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(p);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace eqx_quant::cuda
