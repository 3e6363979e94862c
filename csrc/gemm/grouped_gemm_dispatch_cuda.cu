// The grouped GEMM kernel of a problem (gemm/grouped_gemm_instances_cuda.h).

#include "gemm/grouped_gemm_cuda.h"
#include "gemm/grouped_gemm_instances_cuda.h"

namespace eqx_quant::cuda {
namespace {

using Runner = GemmStatus (*)(const GroupedGemmProblem&, DeviceScratch, cudaStream_t);

enum class Layouts { RowCol, RowRow, ColRow };

// kRows reads b as (K, N) rows (RowRow) or (N, K) rows (RowCol); kWgrad reads
// (M, K) / (M, N) rows (ColRow) or their per-group transposed copies (RowCol).
Layouts LayoutsOf(const GroupedGemmProblem& p) {
  if (p.transposed) return Layouts::RowCol;
  return p.kind == GroupedGemmKind::kRows ? Layouts::RowRow : Layouts::ColRow;
}

Runner Find(const GroupedGemmProblem& p) {
  using E = GemmElement;
  constexpr E Bf16 = E::kBf16, E4m3 = E::kE4m3, E5m2 = E::kE5m2, F32 = E::kF32;
  const Layouts layouts = LayoutsOf(p);
  // The requested kernel if it was built, else 128 x 128 with promoted sums
  // (a tile or the accumulation changes no more than the sums' rounding).
  struct Choice {
    int tile_m, tile_n;
    bool fast;
  };
  for (const Choice c : {Choice{p.tile_m, p.tile_n, p.fast_accum}, Choice{128, 128, false}}) {
#define EQX_QUANT_MATCH_GROUPED_GEMM(A, B, L, D, TM, TN, F)               \
  if (p.a_type == A && p.b_type == B && layouts == Layouts::L &&          \
      p.out_type == D && c.tile_m == TM && c.tile_n == TN && c.fast == F) { \
    return &grouped_gemm::Run##A##B##L##D##_##TM##x##TN##_##F;            \
  }
    EQX_QUANT_GROUPED_GEMM_INSTANCES(EQX_QUANT_MATCH_GROUPED_GEMM)
#undef EQX_QUANT_MATCH_GROUPED_GEMM
  }
  return nullptr;
}

}  // namespace

bool GroupedGemmSupported(const GroupedGemmProblem& problem) {
  return Find(problem) != nullptr;
}

GemmStatus GroupedGemm(const GroupedGemmProblem& problem,
                       DeviceScratch scratch, cudaStream_t stream) {
  const Runner run = Find(problem);
  if (run == nullptr) {
    return {false, 0,
            "no kernel for these element types and layouts (FP8 operands must "
            "both be K-contiguous)"};
  }
  if (problem.kind == GroupedGemmKind::kRows && problem.groups == 0) {
    // No group: every row is 0.
    const size_t bytes = static_cast<size_t>(problem.m) * problem.n *
                         (problem.out_type == GemmElement::kF32 ? 4 : 2);
    const cudaError_t error = cudaMemsetAsync(problem.out, 0, bytes, stream);
    if (error != cudaSuccess) return {false, static_cast<int>(error), "cudaMemsetAsync"};
    return {};
  }
  if (problem.groups == 0 || problem.m == 0 && problem.kind == GroupedGemmKind::kRows) {
    return {};
  }
  return run(problem, scratch, stream);
}

}  // namespace eqx_quant::cuda
