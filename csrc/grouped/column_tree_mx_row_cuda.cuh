// The MXFP8 rowwise output of the column tree sums kernel (DbiasTreeKernel,
// grouped/dbias_cuda.cu, its only includer): with the MXFP8 op's
// dbias every row the kernel loads is also quantized to MXFP8 rowwise in the
// same read, one SlotTree leaf per loaded slot, exactly as the MXFP8 kernels
// (mxfp8/device_cuda.cuh).

#ifndef EQX_QUANT_CSRC_GROUPED_COLUMN_TREE_MX_ROW_CUDA_CUH_
#define EQX_QUANT_CSRC_GROUPED_COLUMN_TREE_MX_ROW_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/e8m0.h"
#include "common/fp8_format.h"
#include "common/mxfp8_problem.h"
#include "cuda/fp8_convert.cuh"  // StoreCastWords
#include "grouped/dbias_tree_cuda.cuh"
#include "mxfp8/device_cuda.cuh"

namespace eqx_quant::cuda::column_tree_mx {

constexpr int kMxBlock = static_cast<int>(kMxfp8BlockSize);  // 32

// The MXFP8 rowwise output written in the same read
// (grouped/column_tree_sums_cuda.h).
enum class MxRow { kNone, kE4M3, kE5M2 };

// Where that output goes (format kNone: no output).
struct MxRowOut {
  MxRow format = MxRow::kNone;
  uint8_t* row = nullptr;
  uint8_t* row_scale = nullptr;
};

// kMx: the MXFP8 rowwise blocks of a loaded chunk, one slot at a time (the
// SlotTree leaf). Slot j holds the chunk's next row iff SlotKey(j) < m
// (warp-uniform), so the rows go to the slots in slot order; the lanes of a
// block are all live or all not (N % 32 == 0). row / scale: where the
// chunk's first row goes in mx_row / mx_row_scale, at this lane.
template <typename In, Fp8Format kFormat>
struct MxRowLeaf {
  int m;
  bool live;
  int64_t cols;
  uint8_t* row;    // advanced by a row per occupied slot
  uint8_t* scale;

  __device__ __forceinline__ void operator()(int j, const uint32_t (&w)[4]) {
    constexpr int kLanesPerBlock = kMxBlock / In::kVec;
    if (grouped_dbias_tree::SlotKey(j) >= m) return;
    uint32_t key = mxfp8::VectorKey<In>(w);
#pragma unroll
    for (int s = 1; s < kLanesPerBlock; s *= 2) {
      key = max(key, __shfl_xor_sync(0xFFFFFFFFu, key, s));
    }
    const uint32_t e = mxfp8::BlockScale<kFormat>(In::KeyToFloat(key));
    if (live) {
      const float factor = mxfp8::BlockFactor(e);
      uint32_t q[In::kVec / 4];
      mxfp8::QuantizeVector<In, kFormat, true>(w, &factor, q);
      StoreCastWords(row, q);
      if (threadIdx.x % kLanesPerBlock == 0) *scale = e;
    }
    row += cols;
    scale += cols / kMxBlock;
  }
};

// The SlotTree leaf without an MXFP8 output.
struct NoLeaf {
  __device__ __forceinline__ void operator()(int, const uint32_t (&)[4]) {}
};

}  // namespace eqx_quant::cuda::column_tree_mx

#endif  // EQX_QUANT_CSRC_GROUPED_COLUMN_TREE_MX_ROW_CUDA_CUH_
