// The element loops of the NVFP4 CPU kernels (nvfp4/quantize_cpu.cc, nvfp4/amax_cpu.cc).
//
// Each loop is written branch-free over contiguous arrays so that it
// vectorises. The bodies are always-inline templates, instantiated twice by
// EQX_QUANT_NVFP4_DEFINE_LOOPS: once for the baseline ISA and, on x86-64, once
// with AVX2 (the E4M3 / E2M1-SR roundings need per-lane variable shifts,
// which SSE2 lacks); the kernel picks one set at run time. Both sets compute
// the same IEEE binary32 operations, so they give the same bits.
//
// Arrays handled in blocks (`blocks` arguments) hold 16 values per block.
// WriteColumns, the transposed store of the colwise codes, uses SSE2 (the
// x86-64 baseline) where available. CodeOut stores the codes packed two per
// byte (F4E2M1FN).

#ifndef EQX_QUANT_CSRC_NVFP4_LOOPS_CPU_H_
#define EQX_QUANT_CSRC_NVFP4_LOOPS_CPU_H_

#include <algorithm>
#include <cstdint>

#include "common/cpu_input.h"
#include "common/fp8_format.h"
#include "common/nvfp4_format.h"
#include "common/rht.h"
#include "common/threefry.h"

#if defined(__SSE2__) && !defined(EQX_QUANT_NVFP4_PORTABLE_ONLY)
#define EQX_QUANT_NVFP4_SSE2_TRANSPOSE 1
#include <emmintrin.h>
#endif

namespace eqx_quant::cpu::nvfp4_loops {

using cpu::Bf16Input;
using cpu::F16Input;
using cpu::F32Input;

#define EQX_QUANT_NVFP4_ALWAYS_INLINE inline __attribute__((always_inline))

constexpr int kB = kNvfp4Block;

// A run of index octets (common/threefry.h's StochasticRoundingOctet):
// octet m of the run is the octet first_octet + m.
struct SrRun {
  uint32_t key0;
  uint32_t key1;
  uint64_t first_octet;
  uint32_t stream;
};

// dst[j] = float(src[j]).
template <typename Input>
EQX_QUANT_NVFP4_ALWAYS_INLINE
void LoadBody(const typename Input::Storage* __restrict src,
              int64_t n, float* __restrict dst) {
  for (int64_t j = 0; j < n; ++j) dst[j] = Input::ToFloat(src[j]);
}

// max(key, AmaxKey(float(src[j]))) over j.
template <typename Input>
EQX_QUANT_NVFP4_ALWAYS_INLINE
uint32_t AmaxBody(
    const typename Input::Storage* __restrict src, int64_t n, uint32_t key) {
  for (int64_t j = 0; j < n; ++j) {
    key = std::max(key, AmaxKey(Input::ToFloat(src[j])));
  }
  return key;
}

// key[j] = max(key[j], AmaxKey(x[j])).
EQX_QUANT_NVFP4_ALWAYS_INLINE
void MaxKeysBody(const float* __restrict x, int64_t n,
                 uint32_t* __restrict key) {
  for (int64_t j = 0; j < n; ++j) key[j] = std::max(key[j], AmaxKey(x[j]));
}

// out[b] = max over the block's 16 values of AmaxKey(x).
EQX_QUANT_NVFP4_ALWAYS_INLINE
void BlockKeysBody(const float* __restrict x,
                   int64_t blocks,
                   uint32_t* __restrict out) {
  for (int64_t b = 0; b < blocks; ++b) {
    uint32_t key = 0;
    for (int t = 0; t < kB; ++t) key = std::max(key, AmaxKey(x[b * kB + t]));
    out[b] = key;
  }
}

// out[b] = max of the block's 16 keys.
EQX_QUANT_NVFP4_ALWAYS_INLINE
void BlockMaxBody(const uint32_t* __restrict key,
                  int64_t blocks,
                  uint32_t* __restrict out) {
  for (int64_t b = 0; b < blocks; ++b) {
    uint32_t m = 0;
    for (int t = 0; t < kB; ++t) m = std::max(m, key[b * kB + t]);
    out[b] = m;
  }
}

// Scale byte and encode multiplier of n block amaxes (given as keys).
EQX_QUANT_NVFP4_ALWAYS_INLINE
void ScalesBody(const uint32_t* __restrict key, int64_t n,
                Nvfp4TensorScale t,
                uint8_t* __restrict sdb,
                float* __restrict enc) {
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t byte = Nvfp4ScaleByte(BitsToFloat(key[j]), t);
    sdb[j] = byte;
    enc[j] = Nvfp4EncodeMultiplier(byte, t);
  }
}

// out[b * 16 + t] = v[b] (one value per block, repeated on its positions).
template <typename T>
EQX_QUANT_NVFP4_ALWAYS_INLINE
void ExpandBody(const T* __restrict v, int64_t blocks,
                T* __restrict out) {
  for (int64_t b = 0; b < blocks; ++b) {
    for (int t = 0; t < kB; ++t) out[b * kB + t] = v[b];
  }
}

// out[j] = e2m1_RN(x[j] * enc[j]).
EQX_QUANT_NVFP4_ALWAYS_INLINE
void CodesBody(const float* __restrict x,
               const float* __restrict enc, int64_t n,
               uint8_t* __restrict out) {
  for (int64_t j = 0; j < n; ++j) out[j] = FloatToE2M1(x[j] * enc[j]);
}

// out[8m .. 8m + 8) = the random bytes of octet m of `run`, for m < octets:
// one Threefry call per eight elements.
EQX_QUANT_NVFP4_ALWAYS_INLINE
void SrBytesBody(const SrRun& run, int64_t octets, uint8_t* __restrict out) {
  for (int64_t m = 0; m < octets; ++m) {
    uint32_t words[2];
    StochasticRoundingOctet(run.key0, run.key1,
                            run.first_octet + static_cast<uint64_t>(m),
                            run.stream, words[0], words[1]);
    for (int b = 0; b < 8; ++b) {
      out[8 * m + b] = static_cast<uint8_t>(OctetByte(words[0], words[1], b));
    }
  }
}

// out[j] = e2m1_SR(x[j] * enc[j], rbytes[j]).
EQX_QUANT_NVFP4_ALWAYS_INLINE
void CodesSrBody(const float* __restrict x,
                 const float* __restrict enc, int64_t n,
                 const uint8_t* __restrict rbytes,
                 uint8_t* __restrict out) {
  for (int64_t j = 0; j < n; ++j) {
    out[j] = FloatToE2M1Stochastic(x[j] * enc[j], rbytes[j]);
  }
}

// out[jj][j] = RHT output jj of the group x[0..16)[j], for j < n (rows of
// x and out are `stride` floats apart).
EQX_QUANT_NVFP4_ALWAYS_INLINE
void RhtBody(const float* __restrict x, int64_t stride,
             int64_t n, const RhtMatrix& m,
             float* __restrict out) {
  for (int jj = 0; jj < kRhtSize; ++jj) {
    float r[kRhtSize];
    for (int i = 0; i < kRhtSize; ++i) r[i] = m.col[jj][i];
    float* __restrict dst = out + jj * stride;
    for (int64_t j = 0; j < n; ++j) {
      float p[kRhtSize];
      for (int i = 0; i < kRhtSize; ++i) p[i] = x[i * stride + j] * r[i];
      dst[j] = RoundToBf16(PairwiseSum16(p));
    }
  }
}

// The transposed write of colwise codes: codes[i * codes_stride + j] is the
// code of panel row i at position j. For the `count` (<= 16) positions j0,
// j0 + 1, ...: position j0 + t goes to dst + t * stride, one byte per row
// (`rows` <= 16 bytes). SSE2 16 x 16 byte transpose for full panels.
inline void WriteColumns(const uint8_t* codes, int64_t codes_stride, int64_t j0,
                         int count, int rows, uint8_t* dst, int64_t stride) {
#if defined(EQX_QUANT_NVFP4_SSE2_TRANSPOSE)
  if (rows == kB) {  // 16 x 16 byte transpose in registers
    __m128i a[16], b[16];
    for (int i = 0; i < 16; ++i) {
      a[i] = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(codes + i * codes_stride + j0));
    }
    for (int i = 0; i < 16; i += 2) {  // bytes of rows (i, i + 1)
      b[i] = _mm_unpacklo_epi8(a[i], a[i + 1]);
      b[i + 1] = _mm_unpackhi_epi8(a[i], a[i + 1]);
    }
    for (int g = 0; g < 16; g += 4) {  // 16-bit pairs of rows g .. g + 3
      a[g] = _mm_unpacklo_epi16(b[g], b[g + 2]);
      a[g + 1] = _mm_unpackhi_epi16(b[g], b[g + 2]);
      a[g + 2] = _mm_unpacklo_epi16(b[g + 1], b[g + 3]);
      a[g + 3] = _mm_unpackhi_epi16(b[g + 1], b[g + 3]);
    }
    // a[4q + m] now holds rows 4q .. 4q + 3 of positions 4m .. 4m + 3.
    for (int h = 0; h < 2; ++h) {  // rows 8h .. 8h + 7
      for (int m = 0; m < 4; ++m) {
        b[8 * h + 2 * m] = _mm_unpacklo_epi32(a[8 * h + m], a[8 * h + 4 + m]);
        b[8 * h + 2 * m + 1] =
            _mm_unpackhi_epi32(a[8 * h + m], a[8 * h + 4 + m]);
      }
    }
    // b[8h + p] holds rows 8h .. 8h + 7 of positions 2p, 2p + 1.
    for (int p = 0; p < 8; ++p) {
      const __m128i even = _mm_unpacklo_epi64(b[p], b[8 + p]);
      const __m128i odd = _mm_unpackhi_epi64(b[p], b[8 + p]);
      if (2 * p < count) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * p * stride),
                         even);
      }
      if (2 * p + 1 < count) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * p + 1) * stride),
                         odd);
      }
    }
    return;
  }
#endif
  for (int t = 0; t < count; ++t) {
    for (int i = 0; i < rows; ++i) {
      dst[t * stride + i] = codes[i * codes_stride + j0 + t];
    }
  }
}

// codes[0..count) (E2M1 codes, 0..15) to the elements index .. index + count
// - 1 of a packed F4E2M1FN buffer: element e is nibble e % 2 (0 = low) of
// base[e / 2]. A byte shared with an element outside the run keeps that
// element's nibble.
inline void WritePackedRun(uint8_t* base, int64_t index, const uint8_t* codes,
                           int64_t count) {
  if (count <= 0) return;
  int64_t j = 0;
  if (index % 2 != 0) {  // the run starts in a high nibble
    uint8_t& byte = base[index / 2];
    byte = static_cast<uint8_t>((byte & 0x0Fu) | (codes[0] << 4));
    j = 1;
  }
  uint8_t* __restrict dst = base + (index + j) / 2;
  const uint8_t* __restrict src = codes + j;
  const int64_t pairs = (count - j) / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    dst[p] = static_cast<uint8_t>(src[2 * p] | (src[2 * p + 1] << 4));
  }
  if ((count - j) % 2 != 0) {  // the run ends in a low nibble
    uint8_t& byte = dst[pairs];
    byte = static_cast<uint8_t>((byte & 0xF0u) | src[2 * pairs]);
  }
}

// Where the codes of one part of one example go: packed from element
// `first` of the F4E2M1FN buffer at `base`. Indices are element indices
// within the example.
struct CodeOut {
  uint8_t* base = nullptr;
  int64_t first = 0;

  // codes[0..count) to the elements index .. index + count - 1.
  void Run(int64_t index, const uint8_t* codes, int64_t count) const {
    WritePackedRun(base, first + index, codes, count);
  }

  // The transposed write of colwise codes (WriteColumns' arguments; `index`
  // is the element of position j0's first row, positions `stride` elements
  // apart).
  void Columns(const uint8_t* codes, int64_t codes_stride, int64_t j0,
               int count, int rows, int64_t index, int64_t stride) const {
    uint8_t columns[kB * kB];  // columns[t * kB + i]: position j0 + t, row i
    WriteColumns(codes, codes_stride, j0, count, rows, columns, kB);
    for (int t = 0; t < count; ++t) {
      WritePackedRun(base, first + index + t * stride, columns + t * kB, rows);
    }
  }
};

// A set of the loops above compiled with the function attributes ATTR.
#define EQX_QUANT_NVFP4_DEFINE_LOOPS(NAME, ATTR)                               \
  struct NAME {                                                                \
    template <typename Input>                                                  \
    ATTR static void Load(const typename Input::Storage* src, int64_t n,       \
                          float* dst) {                                        \
      LoadBody<Input>(src, n, dst);                                            \
    }                                                                          \
    template <typename Input>                                                  \
    ATTR static uint32_t Amax(const typename Input::Storage* src, int64_t n,   \
                              uint32_t key) {                                  \
      return AmaxBody<Input>(src, n, key);                                     \
    }                                                                          \
    ATTR static void MaxKeys(const float* x, int64_t n, uint32_t* key) {       \
      MaxKeysBody(x, n, key);                                                  \
    }                                                                          \
    ATTR static void BlockKeys(const float* x, int64_t blocks,                 \
                               uint32_t* out) {                                \
      BlockKeysBody(x, blocks, out);                                           \
    }                                                                          \
    ATTR static void BlockMax(const uint32_t* key, int64_t blocks,             \
                              uint32_t* out) {                                 \
      BlockMaxBody(key, blocks, out);                                          \
    }                                                                          \
    ATTR static void Scales(const uint32_t* key, int64_t n,                    \
                            const Nvfp4TensorScale& t, uint8_t* sdb,           \
                            float* enc) {                                      \
      ScalesBody(key, n, t, sdb, enc);                                         \
    }                                                                          \
    ATTR static void ExpandFloats(const float* v, int64_t blocks,              \
                                  float* out) {                                \
      ExpandBody(v, blocks, out);                                              \
    }                                                                          \
    ATTR static void Codes(const float* x, const float* enc, int64_t n,        \
                           uint8_t* out) {                                     \
      CodesBody(x, enc, n, out);                                               \
    }                                                                          \
    ATTR static void SrBytes(const SrRun& run, int64_t octets,                \
                             uint8_t* out) {                                   \
      SrBytesBody(run, octets, out);                                           \
    }                                                                          \
    ATTR static void CodesSr(const float* x, const float* enc, int64_t n,      \
                             const uint8_t* rbytes, uint8_t* out) {            \
      CodesSrBody(x, enc, n, rbytes, out);                                     \
    }                                                                          \
    ATTR static void Rht(const float* x, int64_t stride, int64_t n,            \
                         const RhtMatrix& m, float* out) {                     \
      RhtBody(x, stride, n, m, out);                                           \
    }                                                                          \
  };

EQX_QUANT_NVFP4_DEFINE_LOOPS(GenericLoops, )
// EQX_QUANT_NVFP4_PORTABLE_ONLY (for tests) builds only the baseline loops.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(EQX_QUANT_NVFP4_PORTABLE_ONLY)
#define EQX_QUANT_NVFP4_AVX2_LOOPS 1
EQX_QUANT_NVFP4_DEFINE_LOOPS(Avx2Loops, __attribute__((target("avx2"))))
#endif

#undef EQX_QUANT_NVFP4_DEFINE_LOOPS
#undef EQX_QUANT_NVFP4_ALWAYS_INLINE

}  // namespace eqx_quant::cpu::nvfp4_loops

#endif  // EQX_QUANT_CSRC_NVFP4_LOOPS_CPU_H_
