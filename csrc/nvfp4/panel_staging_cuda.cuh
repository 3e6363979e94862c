// Where PanelKernel (nvfp4/panel_cuda.cu) keeps a thread's panel and
// stages its colwise outputs, shared by the 1D colwise steps there and the 2D
// path (nvfp4/panel_2d_cuda.cuh), and StoreStagedColumns, which
// writes them out to the T layout.

#ifndef EQX_QUANT_CSRC_NVFP4_PANEL_STAGING_CUDA_CUH_
#define EQX_QUANT_CSRC_NVFP4_PANEL_STAGING_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "nvfp4/math_cuda.cuh"

namespace eqx_quant::cuda::nvfp4 {

// A CTA of PanelKernel: one panel per warp.
constexpr int kPanelWarps = 8;
constexpr int kPanelThreads = 32 * kPanelWarps;

// The panels in shared memory: [warp][row i][lane][16 bytes] (a warp's
// copies of one row are 512 contiguous bytes); each thread reads back only
// its own until the colwise outputs are staged (StoreStagedColumns).
constexpr int kPanelRowBytes = 32 * 16;
constexpr int kPanelBytes = kPanelWarps * kB * kPanelRowBytes;  // 64 KiB

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

// The CTA's staged colwise outputs of example ex to the T layout, after a
// barrier (Params: PanelKernel's, for its col, col_scale, width, vectors,
// panels and ak): column c of vector v (CTA lane v) is line ex * W + (32 vg
// + v) * kVec + c, whose 8 panels (warps) 8 g .. 8 g + 7 hold 64 contiguous
// code bytes at line * AK / 2 + 64 g and 8 scale bytes at line * AK / 16 +
// 8 g.
// Warp w, lane v staged column c = jw * kPerWord + sub in its word jw
// (StagedCodeRow, StagedScaleRow).
// Four threads write a line's 64 code bytes (16 each: two panels; whole
// 32-byte sectors, where the per-thread 8-byte stores of the panels left
// every sector to four CTAs' warps and made the kernel L2-bound), one thread
// its 8 scale bytes (one store where aligned).
template <int kVec, typename Params>
__device__ __forceinline__ void StoreStagedColumns(const Params& p,
                                                   const uint8_t* panel_smem,
                                                   int64_t ex, uint32_t group,
                                                   uint32_t vector_group) {
  constexpr int kPerWord = kVec / 4;
  constexpr int kLines = 32 * kVec;  // columns of the CTA
  const int64_t first_panel = int64_t{group} * kPanelWarps;
  const int live_panels =
      static_cast<int>(min(int64_t{kPanelWarps}, p.panels - first_panel));
  const int64_t line_bytes = p.ak / 2;
  const int64_t line_scales = p.ak / kB;
  // The staged word of (warp w, lane v, row, word jw).
  auto staged = [&](int w, int v, int row, int jw) {
    return *reinterpret_cast<const uint32_t*>(
        panel_smem + w * (kB * kPanelRowBytes) + row * kPanelRowBytes +
        v * 16 + 4 * jw);
  };
  // Line l = c * 32 + v (a warp: 8 lines of one column, 4 threads each).
#pragma unroll 1
  for (int piece = threadIdx.x; piece < kLines * 4; piece += kPanelThreads) {
    const int l = piece / 4;
    const int k = piece % 4;  // panels 2k, 2k + 1
    const int c = l / 32;
    const int v = l % 32;
    const int64_t vector = int64_t{vector_group} * 32 + v;
    if (vector >= p.vectors || 2 * k >= live_panels) continue;
    const int jw = c / kPerWord;
    const int sub = c % kPerWord;
    const int code_row = StagedCodeRow(sub);
    const uint2 a = make_uint2(staged(2 * k, v, code_row, jw),
                               staged(2 * k, v, code_row + 1, jw));
    const int64_t line = ex * p.width + vector * kVec + c;
    uint8_t* dst = p.col + line * line_bytes + (first_panel + 2 * k) * (kB / 2);
    if (2 * k + 1 < live_panels) {
      const uint2 b = make_uint2(staged(2 * k + 1, v, code_row, jw),
                                 staged(2 * k + 1, v, code_row + 1, jw));
      if (reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
        __stcs(reinterpret_cast<uint4*>(dst), make_uint4(a.x, a.y, b.x, b.y));
        continue;
      }
      __stcs(reinterpret_cast<uint2*>(dst + 8), b);
    }
    __stcs(reinterpret_cast<uint2*>(dst), a);
  }
  for (int l = threadIdx.x; l < kLines; l += kPanelThreads) {
    const int c = l / 32;
    const int v = l % 32;
    const int64_t vector = int64_t{vector_group} * 32 + v;
    if (vector >= p.vectors) continue;
    const int jw = c / kPerWord;
    const int row = StagedScaleRow<kPerWord>(c % kPerWord);
    const int64_t line = ex * p.width + vector * kVec + c;
    uint8_t* dst = p.col_scale + line * line_scales + first_panel;
    if (live_panels == kPanelWarps &&
        reinterpret_cast<uintptr_t>(dst) % 8 == 0) {
      uint32_t lo = 0;
      uint32_t hi = 0;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        lo |= staged(w, v, row, jw) << (8 * w);
        hi |= staged(w + 4, v, row, jw) << (8 * w);
      }
      __stcs(reinterpret_cast<uint2*>(dst), make_uint2(lo, hi));
    } else {
      for (int w = 0; w < live_panels; ++w) {
        dst[w] = static_cast<uint8_t>(staged(w, v, row, jw));
      }
    }
  }
}

}  // namespace eqx_quant::cuda::nvfp4

#endif  // EQX_QUANT_CSRC_NVFP4_PANEL_STAGING_CUDA_CUH_
