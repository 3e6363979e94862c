// The 16-point random Hadamard transform (RHT) of NVFP4's colwise part
// (docs/block_formats.md, "NVFP4"): a group v of 16 values becomes
//   v'_j = bf16( T_i( fl(v_i * R[i][j]) ) ),  R = diag(s) * H16 / 4,
// with H16[i][j] = (-1)^popcount(i & j), s_i = -1 iff bit i of the 16-bit
// sign mask is set, T the pairwise sum ((p0+p1)+(p2+p3))+... in IEEE f32 and
// one round-to-nearest-even to bfloat16 (a NaN sum gives bf16 0x7FC0).
//
// The products and sums are IEEE binary32 operations: on the host run under
// common/scoped_ieee_float_env.h (no flush-to-zero) and without FMA
// contraction.

#ifndef EQX_QUANT_CSRC_COMMON_RHT_H_
#define EQX_QUANT_CSRC_COMMON_RHT_H_

#include <cstdint>

#include "common/fp8_format.h"

namespace eqx_quant {

inline constexpr int kRhtSize = 16;
inline constexpr int64_t kDefaultRhtSignMask = 0xD7E8;

// R[i][j] (exactly +-0.25) for the sign mask `sign_mask` (bits 0..15).
EQX_QUANT_HOST_DEVICE inline float RhtEntry(uint32_t sign_mask, int i, int j) {
  const uint32_t both = static_cast<uint32_t>(i & j);  // 4 bits
  const uint32_t parity =
      (both ^ (both >> 1) ^ (both >> 2) ^ (both >> 3) ^ (sign_mask >> i)) & 1u;
  return parity != 0 ? -0.25f : 0.25f;
}

// The bfloat16 rounding of an f32 (round to nearest even, overflow to inf,
// NaN -> 0x7FC0), returned as the f32 with that value (low 16 bits zero).
EQX_QUANT_HOST_DEVICE inline float RoundToBf16(float value) {
  const uint32_t bits = FloatToBits(value);
  const uint32_t rounded =
      (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return BitsToFloat(nan ? 0x7FC00000u : rounded);
}

// The pairwise sum T(p[0..16)) = (((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7)))+...
EQX_QUANT_HOST_DEVICE inline float PairwiseSum16(const float* p) {
  float level1[8];
  for (int i = 0; i < 8; ++i) level1[i] = p[2 * i] + p[2 * i + 1];
  float level2[4];
  for (int i = 0; i < 4; ++i) level2[i] = level1[2 * i] + level1[2 * i + 1];
  const float level3a = level2[0] + level2[1];
  const float level3b = level2[2] + level2[3];
  return level3a + level3b;
}

// The 16x16 matrix R of a sign mask, column-major (col[j][i] = R[i][j]), so
// output j reads one contiguous column.
struct RhtMatrix {
  float col[kRhtSize][kRhtSize];
};

EQX_QUANT_HOST_DEVICE inline RhtMatrix MakeRhtMatrix(uint32_t sign_mask) {
  RhtMatrix m;
  for (int j = 0; j < kRhtSize; ++j) {
    for (int i = 0; i < kRhtSize; ++i) m.col[j][i] = RhtEntry(sign_mask, i, j);
  }
  return m;
}

// v' = RHT(v) for one group of 16 values, each output rounded to bf16.
EQX_QUANT_HOST_DEVICE inline void Rht16(const RhtMatrix& m, const float* v,
                                        float* out) {
  for (int j = 0; j < kRhtSize; ++j) {
    float p[kRhtSize];
    for (int i = 0; i < kRhtSize; ++i) p[i] = v[i] * m.col[j][i];
    out[j] = RoundToBf16(PairwiseSum16(p));
  }
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_RHT_H_
