// Where PanelKernel (kernels/nvfp4_panel_cuda.cu) keeps a thread's panel and
// stages its colwise outputs, shared by the 1D colwise steps there and the 2D
// path (kernels/nvfp4_panel_2d_cuda.cuh); StoreStagedColumns reads them back.

#ifndef EQX_QUANT_CSRC_KERNELS_NVFP4_PANEL_STAGING_CUDA_CUH_
#define EQX_QUANT_CSRC_KERNELS_NVFP4_PANEL_STAGING_CUDA_CUH_

#include <cuda_runtime.h>

namespace eqx_quant::cuda::nvfp4 {

// The panels in shared memory: [warp][row i][lane][16 bytes] (a warp's
// copies of one row are 512 contiguous bytes); each thread reads back only
// its own until the colwise outputs are staged (StoreStagedColumns).
constexpr int kPanelRowBytes = 32 * 16;

// Where a thread stages colwise column sub of a step in its word jw (a word
// the step has consumed): the two code words in rows StagedCodeRow(sub) and
// the next, the scale byte in row StagedScaleRow<kPerWord>(sub).
__device__ __forceinline__ constexpr int StagedCodeRow(int sub) {
  return 2 * sub;
}
template <int kPerWord>
__device__ __forceinline__ constexpr int StagedScaleRow(int sub) {
  return 2 * kPerWord + sub;
}

}  // namespace eqx_quant::cuda::nvfp4

#endif  // EQX_QUANT_CSRC_KERNELS_NVFP4_PANEL_STAGING_CUDA_CUH_
