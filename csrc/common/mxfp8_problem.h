// Plain description of one eqx_quant_mxfp8_quantize call, shared by the FFI
// layer (which builds it from XLA buffers) and the kernels (which run it).
// No XLA types.
//
// x (batch dims included) is viewed as the row-major 4-D array
// (outer, blocked, inner, last) = (A, K, C, L) of docs/block_formats.md:
//   * rowwise blocks run along L: element (a, k, c, l) is in block l / 32 of
//     line (a, k, c);
//   * colwise blocks run along K: element (a, k, c, l) is in block k / 32 of
//     column (a, c, l).
// A final partial block is quantized as if zero-padded.

#ifndef EQX_QUANT_CSRC_COMMON_MXFP8_PROBLEM_H_
#define EQX_QUANT_CSRC_COMMON_MXFP8_PROBLEM_H_

#include <cstdint>

#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"  // InputType

namespace eqx_quant {

// Elements per MXFP8 block (both directions).
inline constexpr int64_t kMxfp8BlockSize = 32;

// Number of blocks that cover `length` elements.
inline constexpr int64_t Mxfp8Blocks(int64_t length) {
  return (length + kMxfp8BlockSize - 1) / kMxfp8BlockSize;
}

// The most dbias tree nodes the op's kernels return per tree (a power of two;
// with both layouts the nodes are the 32-row colwise blocks: up to 32768
// rows; eqx_quant/_ops/mxfp8_quantize.py's MAX_TILE_NODES).
inline constexpr int64_t kMaxMxfp8DbiasSplit = 1024;

struct Mxfp8QuantizeProblem {
  InputType input_type = InputType::kF32;
  Fp8Format format = Fp8Format::kE4M3Fn;
  int64_t outer = 1;    // A: product of the dims before the blocked axis
  int64_t blocked = 1;  // K: the colwise-blocked axis (1 if not colwise)
  int64_t inner = 1;    // C: product of the dims between K and the last
  int64_t last = 1;     // L: the last dim, along which rowwise blocks run
  bool rowwise = false;
  bool colwise = false;
};

// Data pointers for one call (all row-major).
struct Mxfp8QuantizeBuffers {
  const void* x = nullptr;       // A x K x C x L, of InputType
  uint8_t* row = nullptr;        // A x K x C x L FP8 bytes, if rowwise
  uint8_t* row_scale = nullptr;  // A x K x C x ceil(L/32) E8M0, if rowwise
  uint8_t* col = nullptr;        // A x K x C x L FP8 bytes, if colwise
  uint8_t* col_scale = nullptr;  // A x ceil(K/32) x C x L E8M0, if colwise
};

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_MXFP8_PROBLEM_H_
