// Plain description of one eqx_quant_fp8_quantize call, shared by the FFI
// layer (which builds it from XLA buffers) and the kernels (which run it).
// No XLA types.
//
// Each of the `batch` examples is viewed as a row-major 2-D matrix of
// rows x cols (= prod(S[:flatten_axis]) x prod(S[flatten_axis:])).

#ifndef EQX_QUANT_CSRC_COMMON_FP8_QUANTIZE_PROBLEM_H_
#define EQX_QUANT_CSRC_COMMON_FP8_QUANTIZE_PROBLEM_H_

#include <cstdint>
#include <vector>

#include "common/fp8_format.h"

namespace eqx_quant {

// The most dbias tree nodes a kernel returns per kept row (a power of two;
// the Python layer's DBIAS_SPLIT, eqx_quant/_ops/fp8_quantize.py).
inline constexpr int64_t kMaxDbiasSplit = 64;

// Element type of the high-precision input.
enum class InputType { kF32, kF16, kBF16 };

// Bytes per element of an input type.
inline constexpr int64_t InputTypeBytes(InputType type) {
  return type == InputType::kF32 ? 4 : 2;
}

struct Fp8QuantizeProblem {
  InputType input_type = InputType::kF32;
  Fp8Format format = Fp8Format::kE4M3Fn;
  int64_t batch = 1;  // number of examples (product of the batch dims)
  int64_t rows = 1;   // M per example
  int64_t cols = 1;   // N per example
  bool rowwise = false;
  bool colwise = false;
  bool with_dbias = false;
  // Current scaling inside the op: each example's scale is
  // ScaleFromAmax(amax of the example, scale[b], format) (common/fp8_format.h)
  // instead of scale[b] itself.
  bool scale_from_amax = false;
  // dbias: the rows of an example are indexed by S[:flatten_axis]; the first
  // dbias_keep of those axes are kept (dbias_kept_rows = their product) and
  // the rest, dbias_reduced_dims = S[dbias_keep:flatten_axis], are reduced.
  // dbias_kept_rows * prod(dbias_reduced_dims) == rows.
  int64_t dbias_kept_rows = 1;
  // The first reduced axis, S[dbias_keep], is split into dbias_split nodes of
  // its canonical tree (P divides n: node p covers indices [p*n/P, (p+1)*n/P));
  // dbias holds one partial sum per node: batch x kept x dbias_split x cols,
  // node 0 then replaced by the tree over all nodes (the whole axis' tree).
  // A power of two <= kMaxDbiasSplit.
  int64_t dbias_split = 1;
  std::vector<int64_t> dbias_reduced_dims;
  // Also write node 0 of each tree, finished, in the input type (NaN
  // canonical; common/float_narrow.h) to dbias_cast. Needs with_dbias.
  bool dbias_cast = false;
};

// Data pointers for one call; the per-example blocks are contiguous.
struct Fp8QuantizeBuffers {
  const void* x = nullptr;       // batch x rows x cols, of InputType
  const float* scale = nullptr;  // batch (the fallback if scale_from_amax)
  uint8_t* row = nullptr;        // batch x rows x cols, if rowwise
  uint8_t* col = nullptr;        // batch x cols x rows, if colwise
  float* scale_inv = nullptr;    // batch
  float* amax = nullptr;         // batch
  float* dbias = nullptr;  // batch x dbias_kept_rows x split x cols
  void* dbias_cast = nullptr;  // batch x dbias_kept_rows x cols, InputType
};

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_FP8_QUANTIZE_PROBLEM_H_
