"""Pure-JAX reference of FP8 block scaling (1x128 / 128x128, TE PyTorch's
`Float8BlockQuantizer`; docs/block_formats.md, "FP8 block scaling").

Bit-exact with TE's kernels `common/transpose/quantize_transpose_vector_blockwise.cu` (1x128)
and `..._square_blockwise.cu` (128x128), whose scale is `common/recipe/recipe_common.cuh`'s
`compute_scale_from_amax`; every float operation is done on the bit patterns (`ieee`):

    amax      = max |x| over the block's elements, NaN ignored (the kernels' fmaxf)
    amax      = epsilon                    if amax < epsilon
    scale     = 1                          if amax is 0 or inf
              = fl(fp8_max / amax)         else; x's dtype's largest finite value if that
                                           overflows; with power_2_scales the mantissa bits
                                           are then cleared (rounded down to a power of two)
    scale_inv = fl(1 / scale)              (float32, the stored dequantization scale)
    q         = fp8_satfinite(fl(x * scale))

Functions take one example's 2-D view `(rows, cols)`. Blocks are `(1, 128)` (along the
columns) or `(128, 128)`; the last block of a dim that 128 does not divide is partial (its
missing elements count as zeros, which change no amax). Scales are returned compact: one
float32 per block, `(rows / block_rows, cols / block_cols)` rounded up.
"""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Shaped

from .fp8 import FP8_MAX, cast_fp8, reciprocal
from .ieee import bits, cast_canonical, divide, from_bits, multiply

BLOCK = 128
_MAG = np.uint32(0x7FFFFFFF)
_INF = np.uint32(0x7F800000)
_POWER_OF_TWO = np.uint32(0xFF800000)

# The value of an overflowing scale: the largest finite value of x's dtype
# (`compute_scale_from_types`' `value_for_inf`).
INPUT_MAX = {
    "float32": float(np.finfo(np.float32).max),
    "bfloat16": float(jnp.finfo(jnp.bfloat16).max),
    "float16": float(np.finfo(np.float16).max),
}


def block_shape(use_2d: bool) -> tuple[int, int]:
    return (BLOCK, BLOCK) if use_2d else (1, BLOCK)


def scale_grid(rows: int, cols: int, use_2d: bool) -> tuple[int, int]:
    """The compact scale matrix's shape for a `(rows, cols)` view."""
    br, bc = block_shape(use_2d)
    return -(-rows // br), -(-cols // bc)


def block_amax(x2d: Shaped[Array, "r c"], use_2d: bool) -> Float[Array, "nr nc"]:
    """max |x| per block, NaN ignored; exact for subnormals (taken on the bit patterns,
    which order like the magnitudes)."""
    r, c = x2d.shape
    br, bc = block_shape(use_2d)
    nr, nc = scale_grid(r, c, use_2d)
    mag = bits(x2d.astype(jnp.float32)) & _MAG
    mag = jnp.where(mag > _INF, jnp.uint32(0), mag)
    mag = jnp.pad(mag, ((0, nr * br - r), (0, nc * bc - c)))
    return from_bits(mag.reshape(nr, br, nc, bc).max(axis=(1, 3)))


def block_scale(
    amax: Float[Array, "..."], q_dtype: str, x_dtype: str, power_2_scales: bool, epsilon: float
) -> Float[Array, "..."]:
    """`compute_scale_from_amax` (module doc) of non-negative block amaxes."""
    eps = np.float32(epsilon)
    amax = jnp.where(bits(amax) < bits(jnp.float32(eps)), jnp.float32(eps), amax)
    amax_bits = bits(amax)
    unit = (amax_bits == 0) | (amax_bits >= _INF)
    quotient = divide(jnp.full_like(amax, FP8_MAX[q_dtype]), amax)
    scale = jnp.where(bits(quotient) == _INF, jnp.float32(INPUT_MAX[x_dtype]), quotient)
    if power_2_scales:
        scale = from_bits(bits(scale) & _POWER_OF_TWO)
    return jnp.where(unit, jnp.float32(1.0), scale)


def expand(scales: Float[Array, "nr nc"], rows: int, cols: int, use_2d: bool) -> Array:
    """Each element's block value, `(rows, cols)`."""
    br, bc = block_shape(use_2d)
    return jnp.repeat(jnp.repeat(scales, br, axis=0), bc, axis=1)[:rows, :cols]


def quantize_2d(
    x2d: Shaped[Array, "r c"], q_dtype: str, use_2d: bool, power_2_scales: bool, epsilon: float
) -> tuple[Shaped[Array, "r c"], Float[Array, "nr nc"]]:
    """(FP8 data, compact float32 scale_inv) of one `(rows, cols)` view."""
    r, c = x2d.shape
    scale = block_scale(
        block_amax(x2d, use_2d), q_dtype, x2d.dtype.name, power_2_scales, epsilon
    )
    y = multiply(x2d.astype(jnp.float32), expand(scale, r, c, use_2d))
    return cast_fp8(y, q_dtype), reciprocal(scale)


def dequantize_2d(
    q: Shaped[Array, "r c"], scale_inv: Float[Array, "nr nc"], use_2d: bool, dq_dtype
) -> Shaped[Array, "r c"]:
    """`fl(float32(q) * scale_inv)` per block, rounded once to `dq_dtype`."""
    r, c = q.shape
    y = multiply(q.astype(jnp.float32), expand(scale_inv, r, c, use_2d))
    return cast_canonical(y, dq_dtype)
