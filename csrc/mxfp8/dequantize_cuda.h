// CUDA kernel of eqx_quant_mxfp8_dequantize (docs/block_formats.md): a dense
// MXFP8 part's values, each FP8 payload times its E8M0 block scale, as
// bfloat16 (rounded to nearest even; exact down to 2^-133) or float32 (exact),
// NaN payloads and scales giving the quiet NaN: the operand a bfloat16 GEMM
// multiplies on Hopper (no block-scaled MMA), bit for bit the pure-JAX
// dequantize (reference/blocks_nd.py mxfp8_dequantize).
//
// The part is viewed as (A, L, B) with the blocks of 32 along L: rowwise parts
// are (rows, N, 1), colwise ones (dims before the blocked axis, its length,
// dims after); the scales are (A, ceil(L/32), B).
//
// No CUDA or XLA types: the stream is the driver's CUstream_st*.

#ifndef EQX_QUANT_CSRC_MXFP8_DEQUANTIZE_CUDA_H_
#define EQX_QUANT_CSRC_MXFP8_DEQUANTIZE_CUDA_H_

#include <cstdint>

#include "common/fp8_format.h"

struct CUstream_st;

namespace eqx_quant::cuda {

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

// The launch's CUDA error (0: none).
int Mxfp8Dequantize(const Mxfp8DequantizeProblem& problem, CUstream_st* stream);

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_MXFP8_DEQUANTIZE_CUDA_H_
