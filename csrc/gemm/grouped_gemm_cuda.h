// The grouped (MoE) GEMM on Hopper tensor cores (docs/gemm.md, "Grouped GEMM
// kernel"): CUTLASS's pointer-array grouped GEMM (TMA, warp-specialized,
// float32 accumulation), its per-group shapes, pointers and strides filled on
// the device from the device-side group counts, so the host never waits.
//
// Two products, the two an MoE layer needs:
//   kRows   out (M, N): rows [start_g, start_g + count_g) of a (M, K) times
//           b[g] (K x N); rows before the first group (first_row) and past
//           the last are 0 (forward and input gradient).
//   kWgrad  out (G, K, N): a_g^T c_g over the rows of group g of a (M, K) and
//           c (M, N) (c is passed as `b`); 0 for a group of no rows (weight
//           gradient).
// Each group's result is multiplied by alpha[g] when alpha is given (the
// product of the operands' per-group FP8 scale_inv).
//
// Included by .cu files only; free of XLA types.

#ifndef EQX_QUANT_CSRC_GEMM_GROUPED_GEMM_CUDA_H_
#define EQX_QUANT_CSRC_GEMM_GROUPED_GEMM_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gemm/gemm_status.h"

namespace eqx_quant::cuda {

enum class GemmElement : int { kBf16 = 0, kE4m3 = 1, kE5m2 = 2, kF32 = 3 };

enum class GroupedGemmKind : int { kRows = 0, kWgrad = 1 };

struct GroupedGemmProblem {
  GroupedGemmKind kind = GroupedGemmKind::kRows;
  int64_t m = 0;  // token rows of a (and of c for kWgrad)
  int64_t k = 0;
  int64_t n = 0;
  int64_t groups = 0;
  GemmElement a_type = GemmElement::kBf16;
  GemmElement b_type = GemmElement::kBf16;
  GemmElement out_type = GemmElement::kBf16;
  // kRows: b is stored (G, N, K) (K contiguous) rather than (G, K, N).
  // kWgrad: a and c are stored per group transposed, as grouped_quantize's
  // colwise copies (group g's (K, count_g) block at K * start_g), rather than
  // as (M, K) and (M, N) rows.
  bool transposed = false;
  // The tile (rows x columns of out per CTA) and the FP8 accumulation the
  // caller asks for (a preference: where that kernel was not built, the
  // 128 x 128 tile with promoted sums runs). 256 x 128 suits long groups,
  // 128 x 128 short ones (a 256-row tile would be half empty), 128 x 256 long
  // groups of FP8 rows. fast_accum keeps the FP8 tensor cores' partial sums
  // in their accumulator for the whole K loop (what cuBLASLt and TE's forward
  // GEMMs do) instead of promoting them to float32 every few MMAs.
  int tile_m = 128;
  int tile_n = 128;
  bool fast_accum = false;
  const void* a = nullptr;
  const void* b = nullptr;
  const int32_t* counts = nullptr;  // (G,), each >= 0, summing to at most m
  // The first row of group 0 (device scalar; null: 0). A partition of the
  // op runs one device's groups or rows by it (eqx_quant/_ops/grouped_gemm.py).
  const int32_t* first_row = nullptr;
  const float* alpha = nullptr;     // (G,) or null (1)
  void* out = nullptr;
};

// Whether a kernel was built for this problem's element types and layouts
// (the FFI handler's check; the Python side never asks for anything else).
bool GroupedGemmSupported(const GroupedGemmProblem& problem);

// Enqueues the GEMM on `stream`.
GemmStatus GroupedGemm(const GroupedGemmProblem& problem,
                       DeviceScratch scratch, cudaStream_t stream);

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_GEMM_GROUPED_GEMM_CUDA_H_
