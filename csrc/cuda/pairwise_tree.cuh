// The perfect pairwise tree sum in registers (sm_90a device code), shared by
// the FP8 and MXFP8 kernels' dbias node sums.

#ifndef EQX_QUANT_CSRC_CUDA_PAIRWISE_TREE_CUH_
#define EQX_QUANT_CSRC_CUDA_PAIRWISE_TREE_CUH_

namespace eqx_quant::cuda {

// v[0] + ... + v[kWidth - 1] as the perfect pairwise tree (kWidth a power of
// two), level by level in place; the sum ends in v[0]. Recursion over the
// levels keeps every index a constant, so v stays in registers.
template <int kWidth, int kN>
__device__ __forceinline__ void PairwiseTree(float (&v)[kN]) {
  if constexpr (kWidth > 1) {
#pragma unroll
    for (int j = 0; j < kWidth / 2; ++j) v[j] = __fadd_rn(v[2 * j], v[2 * j + 1]);
    PairwiseTree<kWidth / 2>(v);
  }
}

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_CUDA_PAIRWISE_TREE_CUH_
