// CUDA kernel of eqx_quant_nvfp4_dequantize (docs/block_formats.md): a dense
// NVFP4 part's values in its stored layout, each E2M1 code times its E4M3
// block scale times the example's global decode scale (fl(amax / 2688), given),
// as bfloat16 (rounded to nearest even) or float32: the operand a bfloat16
// GEMM multiplies on Hopper (decode scale 1: the exact values), bit for bit
// the pure-JAX dequantize (reference/blocks_nd.py nvfp4_dequantize_with).
// Parts with a random Hadamard transform stay on the pure-JAX path.
//
// The part is (A, L) rows with blocks of 16 along L; the codes are packed two
// per byte in linear order (element 2i in the low nibble), the scales are
// (A, ceil(L/16)) bytes, the decode scales (E,) one per example of A / E rows.
//
// No CUDA or XLA types: the stream is the driver's CUstream_st*.

#ifndef EQX_QUANT_CSRC_NVFP4_DEQUANTIZE_CUDA_H_
#define EQX_QUANT_CSRC_NVFP4_DEQUANTIZE_CUDA_H_

#include <cstdint>

struct CUstream_st;

namespace eqx_quant::cuda {

struct Nvfp4DequantizeProblem {
  bool out_f32 = false;  // float32 values, else bfloat16 bits
  int64_t rows = 0;      // A
  int64_t cols = 0;      // L
  int64_t examples = 1;  // E, dividing A
  const uint8_t* codes = nullptr;         // A x L codes, packed
  const uint8_t* scales = nullptr;        // A x ceil(L/16) E4M3 bytes
  const float* decode_scales = nullptr;   // (E,)
  void* out = nullptr;                    // A x L bfloat16 bits or float32
};

// The launch's CUDA error (0: none).
int Nvfp4Dequantize(const Nvfp4DequantizeProblem& problem, CUstream_st* stream);

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_NVFP4_DEQUANTIZE_CUDA_H_
