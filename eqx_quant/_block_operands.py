"""Block-format GEMM operands as bfloat16 values, for a bfloat16 GEMM with float32 sums.

Hopper has no block-scaled MMA, so `gemm`, `grouped_gemm` and `grouped_wgrad` multiply MXFP8
and NVFP4 operands as dequantized values. Those values fit bfloat16 exactly:

- MXFP8: an E4M3 (4 significant bits) or E5M2 (3) payload times a power of two (E8M0);
- NVFP4: an E2M1 payload (2 significant bits) times its E4M3 block scale (4): at most 5
  significant bits, from 2^-10 to 2688. The FP32 global scale (`amax / 2688`) has 24, so it
  is left out of the operand and applied to the product instead.

bfloat16 has 8 significant bits and float32's exponent range, so every value from 2^-126 up
is exact. (Smaller ones, which only MXFP8 blocks with an E8M0 scale below 2^-117 hold, are
subnormal in float32 too: XLA's CPU dot flushes them to zero, as it did their float32 copies,
and bfloat16 keeps them to a grid of 2^-133.) The products of two bfloat16 values are exact
in float32, so a bfloat16 GEMM with float32 accumulation (the tensor cores' bf16 MMA)
computes what a block-scaled GEMM computes, up to the order of the float32 sums, at bfloat16
speed rather than float32's.

The random Hadamard transform cancels in a product when both operands carry it along the
contracted dim with one sign mask (`(H D a) . (H D b) = a . b`: H D is orthogonal), so such
pairs are multiplied without undoing it, as TE's GEMM does. An operand whose RHT does not
cancel (only one side has it, or the masks differ) is undone in float32, which bfloat16
cannot hold: such pairs are multiplied in float32 at HIGHEST precision (on an H200, 0.06x a
bf16 GEMM against 0.5-0.6x for the bfloat16 path; docs/performance.md).
"""

import jax.numpy as jnp

from ._enums import ScalingMode
from .reference import _nvfp4

# A global amax whose decode scale `fl(amax / 2688)` is exactly 1: dequantizing with it
# leaves the FP32 global scale out of an NVFP4 operand.
_UNIT_GLOBAL_AMAX = 6.0 * 448.0


def is_nvfp4(mode: ScalingMode) -> bool:
    return mode.name.startswith("NVFP4")


def multiplies_in_bf16(lhs_mode: ScalingMode, lhs_rht, rhs_mode: ScalingMode, rhs_rht) -> bool:
    """Whether a pair of block-format parts is multiplied as bfloat16 values (module doc):
    no RHT, or the same RHT on both (it cancels)."""
    if lhs_mode.is_tensor_scaling or rhs_mode.is_tensor_scaling:
        return False
    return lhs_rht == rhs_rht


def unscaled_amax(amax, mode: ScalingMode):
    """The amax to dequantize with: NVFP4's global scale left out (applied to the product);
    MXFP8 has none."""
    return jnp.full_like(amax, _UNIT_GLOBAL_AMAX) if is_nvfp4(mode) else amax


def global_scale(amax):
    """NVFP4's global decode scale of each tensor (or group), float32, shaped as `amax`."""
    return _nvfp4.global_decode_scale(amax.astype(jnp.float32))
