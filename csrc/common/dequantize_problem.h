// Plain descriptions of one eqx_quant_mxfp8_dequantize / eqx_quant_nvfp4_dequantize
// call (docs/block_formats.md), shared by the FFI layer (which builds them from
// XLA buffers) and the CPU and CUDA kernels (which run them). No XLA or CUDA
// types.
//
// MXFP8: the part viewed as (A, L, B) with its blocks of 32 along L (rowwise
// parts are (rows, N, 1), colwise ones (dims before the blocked axis, its
// length, dims after)); the scales are (A, ceil(L/32), B) E8M0 bytes.
// Each value is the FP8 payload times its block scale (exact in float32).
//
// NVFP4: (A, L) rows with blocks of 16 along L; the codes packed two per byte
// in linear order (element 2i in the low nibble), the scales (A, ceil(L/16))
// E4M3 bytes, the decode scales (E,) one per example of A / E rows. Each
// value is fl(fl(E2M1 code x block scale) x decode scale).
//
// Grouped MXFP8 (rowwise): (R, N) rows in ragged groups (the sizes count units
// of U rows), each group's scales in its padded, swizzled region of the
// part's scale buffer (common/grouped_layout.h); bfloat16 out, rows of no
// group 0.
//
// All write float32 or bfloat16 (rounded to nearest even), every NaN as the
// quiet NaN of the pure-JAX path (reference/blocks_nd.py).

#ifndef EQX_QUANT_CSRC_COMMON_DEQUANTIZE_PROBLEM_H_
#define EQX_QUANT_CSRC_COMMON_DEQUANTIZE_PROBLEM_H_

#include <cstdint>

#include "common/fp8_format.h"

namespace eqx_quant {

struct Mxfp8DequantizeProblem {
  Fp8Format format = Fp8Format::kE4M3Fn;
  bool out_f32 = false;  // float32 values, else bfloat16 bits
  int64_t a = 0;
  int64_t l = 0;
  int64_t b = 0;
  const uint8_t* data = nullptr;    // A x L x B FP8 bytes
  const uint8_t* scales = nullptr;  // A x ceil(L/32) x B E8M0 bytes
  void* out = nullptr;              // A x L x B bfloat16 bits or float32
};

struct Nvfp4DequantizeProblem {
  bool out_f32 = false;  // float32 values, else bfloat16 bits
  int64_t rows = 0;      // A
  int64_t cols = 0;      // L
  int64_t examples = 1;  // E, dividing A
  const uint8_t* codes = nullptr;        // A x L codes, packed
  const uint8_t* scales = nullptr;       // A x ceil(L/16) E4M3 bytes
  const float* decode_scales = nullptr;  // (E,)
  void* out = nullptr;                   // A x L bfloat16 bits or float32
};

struct GroupedMxfp8DequantizeProblem {
  Fp8Format format = Fp8Format::kE4M3Fn;
  int64_t rows = 0;           // R
  int64_t cols = 0;           // N
  int64_t groups = 0;         // G >= 1
  int64_t rows_per_unit = 1;  // U: group sizes count units of U rows
  const uint8_t* data = nullptr;    // R x N FP8 bytes
  const uint8_t* scales = nullptr;  // the part's swizzled scale buffer
  const int32_t* sizes = nullptr;   // (G,)
  uint16_t* out = nullptr;          // R x N bfloat16 bits
  // The CUDA kernel's device scratch: 2 * (G + 1) int64 (starts, offsets);
  // the CPU kernel keeps its own.
  int64_t* layout = nullptr;
};

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_DEQUANTIZE_PROBLEM_H_
