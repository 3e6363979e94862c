// Transposition of byte tiles for the CPU kernels' colwise (transposed)
// copies: dst[c * dst_stride + r] = src[r * src_stride + c]. Host only.
//
// Whole 16 x 16 tiles go through SSE2 (x86-64's baseline: no run-time
// dispatch) as four rounds of unpacks, 16 loads and 16 stores per 256 bytes
// instead of a load and a store per byte; the edges and other targets take the
// byte loop. csrc/tests/byte_transpose_test.cc checks both against the
// definition.

#ifndef EQX_QUANT_CSRC_COMMON_BYTE_TRANSPOSE_H_
#define EQX_QUANT_CSRC_COMMON_BYTE_TRANSPOSE_H_

#include <cstdint>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace eqx_quant::cpu {

// rows x cols bytes, one at a time.
inline void TransposeBytesScalar(const uint8_t* src, int64_t src_stride,
                                 uint8_t* dst, int64_t dst_stride, int64_t rows,
                                 int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) {
    uint8_t* __restrict out = dst + c * dst_stride;
    const uint8_t* __restrict in = src + c;
    for (int64_t r = 0; r < rows; ++r) out[r] = in[r * src_stride];
  }
}

#if defined(__SSE2__)
// One 16 x 16 tile.
inline void Transpose16x16Bytes(const uint8_t* src, int64_t src_stride,
                                uint8_t* dst, int64_t dst_stride) {
  __m128i a[16];
  __m128i b[16];
  for (int r = 0; r < 16; ++r) {
    a[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + r * src_stride));
  }
  // Bytes of row pairs: b[2p] holds columns 0-7 of rows 2p and 2p+1
  // interleaved, b[2p+1] columns 8-15.
  for (int p = 0; p < 8; ++p) {
    b[2 * p] = _mm_unpacklo_epi8(a[2 * p], a[2 * p + 1]);
    b[2 * p + 1] = _mm_unpackhi_epi8(a[2 * p], a[2 * p + 1]);
  }
  // Pairs of row pairs: a[4q + k] holds columns 4k..4k+3 of rows 4q..4q+3.
  for (int q = 0; q < 4; ++q) {
    const __m128i* in = b + 4 * q;
    a[4 * q + 0] = _mm_unpacklo_epi16(in[0], in[2]);
    a[4 * q + 1] = _mm_unpackhi_epi16(in[0], in[2]);
    a[4 * q + 2] = _mm_unpacklo_epi16(in[1], in[3]);
    a[4 * q + 3] = _mm_unpackhi_epi16(in[1], in[3]);
  }
  // Eight rows: b[8h + k] holds columns 2k and 2k+1 of rows 8h..8h+7.
  for (int h = 0; h < 2; ++h) {
    const __m128i* in = a + 8 * h;
    for (int k = 0; k < 4; ++k) {
      b[8 * h + 2 * k] = _mm_unpacklo_epi32(in[k], in[4 + k]);
      b[8 * h + 2 * k + 1] = _mm_unpackhi_epi32(in[k], in[4 + k]);
    }
  }
  // All sixteen rows: column 2k from b[k]'s and b[8 + k]'s low halves,
  // column 2k+1 from their high halves.
  for (int k = 0; k < 8; ++k) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * k) * dst_stride),
                     _mm_unpacklo_epi64(b[k], b[8 + k]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * k + 1) * dst_stride),
                     _mm_unpackhi_epi64(b[k], b[8 + k]));
  }
}
#endif

// rows x cols bytes: whole 16 x 16 tiles vectorised where available, the
// edges by the byte loop.
inline void TransposeBytes(const uint8_t* src, int64_t src_stride, uint8_t* dst,
                           int64_t dst_stride, int64_t rows, int64_t cols) {
  int64_t full_rows = 0;
  int64_t full_cols = 0;
#if defined(__SSE2__)
  full_rows = rows - rows % 16;
  full_cols = cols - cols % 16;
  for (int64_t c = 0; c < full_cols; c += 16) {
    for (int64_t r = 0; r < full_rows; r += 16) {
      Transpose16x16Bytes(src + r * src_stride + c, src_stride,
                          dst + c * dst_stride + r, dst_stride);
    }
  }
#endif
  // The right edge (all rows), then the bottom edge of the full columns.
  TransposeBytesScalar(src + full_cols, src_stride, dst + full_cols * dst_stride,
                       dst_stride, rows, cols - full_cols);
  TransposeBytesScalar(src + full_rows * src_stride, src_stride, dst + full_rows,
                       dst_stride, rows - full_rows, full_cols);
}

}  // namespace eqx_quant::cpu

#endif  // EQX_QUANT_CSRC_COMMON_BYTE_TRANSPOSE_H_
