// Plain description of one eqx_quant_fp8_block_quantize call (FP8 with one
// float32 scale per 1x128 block or 128x128 tile; docs/block_formats.md, "FP8
// block scaling"), shared by the FFI layer and the kernels. No XLA types.
//
// Each example of x is its 2-D view (rows, cols) = (prod S[:fa], prod S[fa:]).
// The rowwise copy keeps that layout, with blocks of (block_rows, 128): 1x128
// or 128x128. The colwise copy is the transposed view (cols, rows), quantized
// the same way along its own rows. A final partial block is quantized as if
// zero-padded.

#ifndef EQX_QUANT_CSRC_COMMON_FP8_BLOCK_PROBLEM_H_
#define EQX_QUANT_CSRC_COMMON_FP8_BLOCK_PROBLEM_H_

#include <cstdint>

#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"  // InputType
#include "common/host_device.h"

namespace eqx_quant {

inline constexpr int64_t kFp8Block = 128;

EQX_QUANT_HOST_DEVICE inline constexpr int64_t Fp8Blocks(int64_t length) {
  return (length + kFp8Block - 1) / kFp8Block;
}

struct Fp8BlockQuantizeProblem {
  InputType input_type = InputType::kF32;
  Fp8Format format = Fp8Format::kE4M3Fn;
  int64_t batch = 1;  // examples (product of the vmapped batch dims)
  int64_t rows = 1;   // R = prod S[:fa]
  int64_t cols = 1;   // C = prod S[fa:]
  bool rowwise = false;
  bool colwise = false;
  bool use_2d = false;          // 128x128 tiles, else 1x128 blocks
  bool power_2_scales = false;  // clear each scale's mantissa bits
  float amax_epsilon = 0.0f;    // a floor for each block's amax
  float input_max = 0.0f;       // x's dtype's largest finite value
};

// Data pointers for one call (row-major, examples one after the other).
struct Fp8BlockQuantizeBuffers {
  const void* x = nullptr;       // batch x R x C, of InputType
  uint8_t* row = nullptr;        // batch x R x C FP8 bytes, if rowwise
  float* row_scale = nullptr;    // batch x (R or ceil(R/128)) x ceil(C/128)
  uint8_t* col = nullptr;        // batch x C x R FP8 bytes, if colwise
  float* col_scale = nullptr;    // batch x (C or ceil(C/128)) x ceil(R/128)
};

// The largest finite value of x's dtype (Fp8BlockQuantizeProblem::input_max).
inline constexpr float Fp8BlockInputMax(InputType type) {
  switch (type) {
    case InputType::kF16:
      return 65504.0f;
    case InputType::kBF16:
      return 3.38953139e38f;  // 0x7F7F0000
    case InputType::kF32:
      break;
  }
  return 3.40282347e38f;  // FLT_MAX
}

// TE's compute_scale_from_amax (common/recipe/recipe_common.cuh) for a
// NaN-free, non-negative block amax: the amax floored at `epsilon`; 1 for an
// amax of 0 or inf; else fl(fp8_max / amax), x's dtype's largest finite value
// where that overflows, its mantissa bits cleared with power-of-two scales.
// One IEEE division (correctly rounded with the FPU in IEEE mode on the host,
// and with nvcc's default -prec-div=true on a device).
EQX_QUANT_HOST_DEVICE inline float Fp8BlockScale(float amax, float fp8_max,
                                                 float input_max,
                                                 bool power_2_scales,
                                                 float epsilon) {
  if (amax < epsilon) amax = epsilon;
  const uint32_t amax_bits = FloatToBits(amax);
  if (amax_bits == 0 || amax_bits == 0x7F800000u) return 1.0f;
  float scale = fp8_max / amax;
  if (FloatToBits(scale) == 0x7F800000u) scale = input_max;
  if (power_2_scales) scale = BitsToFloat(FloatToBits(scale) & 0xFF800000u);
  return scale;
}

// The scale_inv the problem's settings give an all-zero block (a grouped
// op's rows of no group): 1 / the scale of an amax of 0 floored at epsilon.
inline float Fp8BlockZeroScaleInv(const Fp8BlockQuantizeProblem& p) {
  return 1.0f / Fp8BlockScale(0.0f, Fp8MaxFinite(p.format), p.input_max,
                              p.power_2_scales, p.amax_epsilon);
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_FP8_BLOCK_PROBLEM_H_
