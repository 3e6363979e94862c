// Plain descriptions of the eqx_quant_nvfp4_amax and eqx_quant_nvfp4_quantize
// calls, shared by the FFI layer (which builds them from XLA buffers) and the
// kernels (which run them). No XLA types.
//
// Each of the `batch` examples (per-example shape S, rank n) is viewed as the
// row-major 4-D array (A, K, C, L) of docs/block_formats.md:
//   with k_axis = fa - 1 >= 0:  A = prod S[:k_axis], K = S[k_axis],
//                               C = prod S[k_axis+1 : n-1], L = S[n-1];
//   with k_axis = -1:           A = prod S[:n-1], K = C = 1, L = S[n-1].
// Rowwise blocks run along L, colwise blocks along K, 2D tiles are 16 x 16
// over (K, L) at fixed (a, c).

#ifndef EQX_QUANT_CSRC_COMMON_NVFP4_PROBLEM_H_
#define EQX_QUANT_CSRC_COMMON_NVFP4_PROBLEM_H_

#include <cstdint>
#include <vector>

#include "common/fp8_quantize_problem.h"  // InputType

namespace eqx_quant {

// The (A, K, C, L) view of one example and where its axes come from.
struct Nvfp4View {
  InputType input_type = InputType::kF32;
  int64_t batch = 1;  // number of examples (product of the batch dims)
  int64_t a = 1;
  int64_t k = 1;
  int64_t c = 1;
  int64_t l = 1;
  std::vector<int64_t> shape;  // S, n >= 1 dims
  int64_t k_axis = -1;         // index of K in S, or -1 (see above)
};

struct Nvfp4AmaxProblem {
  Nvfp4View view;
  bool with_rht = false;  // also the max |RHT(x)| over the groups along K
  uint32_t rht_sign_mask = 0;
};

// Data pointers of one eqx_quant_nvfp4_amax call; per-example blocks are
// contiguous.
struct Nvfp4AmaxBuffers {
  const void* x = nullptr;    // batch x (A, K, C, L), of InputType
  float* amax = nullptr;      // batch
  float* rht_amax = nullptr;  // batch, if with_rht
};

struct Nvfp4QuantizeProblem {
  Nvfp4View view;
  bool rowwise = false;
  bool colwise = false;
  bool use_2d = false;
  bool use_rht = false;  // colwise part only; requires K % 16 == 0
  uint32_t rht_sign_mask = 0;
  bool stochastic_rounding = false;
  // The unsharded S (for the stochastic-rounding index), n entries.
  std::vector<int64_t> global_shape;
};

// The strides of the stochastic-rounding indices (docs/block_formats.md) in
// the global shape G (n = G.size() entries each): rowwise, index ravel(s, G),
// dim d's stride is prod(G[d+1:]); colwise, ravel(T(s), T(G)) with T(v) =
// v[fa:] + v[:fa] and fa = k_axis + 1, it is dim d's stride in T(G) (k_axis's
// is 1). Without a K axis (k_axis < 0) `col` is not written.
inline void Nvfp4SrStrides(const std::vector<int64_t>& global_shape,
                           int64_t k_axis, uint64_t* row, uint64_t* col) {
  const int n = static_cast<int>(global_shape.size());
  uint64_t stride = 1;
  for (int d = n - 1; d >= 0; --d) {
    row[d] = stride;
    stride *= static_cast<uint64_t>(global_shape[d]);
  }
  if (k_axis < 0) return;
  // T order: dims fa .. n-1, then 0 .. fa-1, walked from the last back.
  const int fa = static_cast<int>(k_axis) + 1;
  stride = 1;
  for (int t = n - 1; t >= 0; --t) {
    const int d = t < n - fa ? fa + t : t - (n - fa);
    col[d] = stride;
    stride *= static_cast<uint64_t>(global_shape[d]);
  }
}

// Data pointers of one eqx_quant_nvfp4_quantize call; per-example blocks are
// contiguous. Codes are E2M1 codes (0..15) packed two per byte as XLA stores
// F4E2M1FN (flat element i of the buffer in nibble i % 2, 0 = low, of byte
// i / 2); scales E4M3 bytes.
struct Nvfp4QuantizeBuffers {
  const void* x = nullptr;            // batch x (A, K, C, L), of InputType
  const float* amax = nullptr;        // batch: rowwise global amax
  const float* col_amax = nullptr;    // batch: colwise global amax
  const uint32_t* key = nullptr;      // batch x 2 threefry key words
  const int32_t* offset = nullptr;    // n: offset of this shard in S
  uint8_t* row = nullptr;             // batch x (A, K, C, L)
  uint8_t* row_scale = nullptr;       // batch x (A, K, C, ceil(L/16))
  uint8_t* col = nullptr;             // batch x (C, L, A, K)
  uint8_t* col_scale = nullptr;       // batch x (C, L, A, ceil(K/16))
  // With packed codes: the element of row / col where example 0's codes
  // start (odd: in a high nibble). The CPU kernel's grouped calls set it;
  // the FFI handlers and the CUDA kernels use 0.
  int64_t code_first = 0;
};

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_NVFP4_PROBLEM_H_
