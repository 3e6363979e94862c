"""GEMM-ready block scales (docs/block_formats.md): each format's layout for cuBLAS (MXFP8 and
NVFP4: padded to (128, 4) tiles and swizzled; FP8 block scaling: cuBLASLt's 1x128 / 128x128
layouts), and the inverse."""

import math

import jax
from jaxtyping import Array, Shaped

from .._formats import format_of, is_block_mode


def _check_block_part(fn: str, part) -> None:
    if not is_block_mode(part.scaling_mode):
        raise ValueError(
            f"{fn}: GEMM-ready scales exist only for block formats (MXFP8, NVFP4, FP8 block); "
            "this part has "
            f"{part.scaling_mode.name}, whose scale_inv is one float32 per tensor."
        )
    if part.data.ndim != part.ndim:
        raise ValueError(
            f"{fn}: the part has {part.data.ndim - part.ndim} leading vmapped dims; swizzle one "
            "example at a time, e.g. jax.vmap(lambda t: t.gemm_scale_inv())(part)."
        )


def _matrix_shape(part) -> tuple[tuple[int, int], bool]:
    """The 2-D scale matrix of a part and whether it is tiled as rowwise: a colwise part
    kept in x's layout has its scales down the rows, the transpose of the rowwise tiling."""
    shape = part.scale_inv.shape
    fmt = format_of(part.scaling_mode)
    if part.is_colwise and fmt.colwise_data_layout == "N":
        fa = part.flatten_axis
        return (math.prod(shape[:fa]), math.prod(shape[fa:])), False
    return (math.prod(shape[:-1]), shape[-1]), True


def gemm_scale_inv(part) -> Shaped[Array, "Rp Cp"]:
    """See `ScaledTensor1x.gemm_scale_inv`."""
    _check_block_part("gemm_scale_inv", part)
    (r, c), rowwise = _matrix_shape(part)
    fmt = format_of(part.scaling_mode)
    return fmt.gemm_ready_scales(
        part.scale_inv.reshape(r, c), rowwise=rowwise, mode=part.scaling_mode
    )


def unswizzle_scales(swizzled: Shaped[Array, "Rp Cp"], like) -> Shaped[Array, "..."]:
    """Inverse of `part.gemm_scale_inv()`: the unpadded scales in `like.scale_inv`'s shape.

    **Arguments:**

    - `swizzled`: the swizzled, padded scale matrix (as returned by `gemm_scale_inv`).
    - `like`: the `ScaledTensor1x` part the scales belong to (gives shape and orientation).
    """
    _check_block_part("unswizzle_scales", like)
    dtype = like.scale_inv.dtype
    if not isinstance(swizzled, jax.Array) or swizzled.dtype != dtype:
        got = f"{type(swizzled).__name__} of dtype {getattr(swizzled, 'dtype', '?')}"
        raise TypeError(
            f"unswizzle_scales: swizzled must be a jax.Array of {dtype} (the dtype of "
            f"like.scale_inv), got {got}. Pass the output of like.gemm_scale_inv()."
        )
    (r, c), rowwise = _matrix_shape(like)
    fmt = format_of(like.scaling_mode)
    flat = fmt.from_gemm_ready_scales(
        swizzled, rowwise=rowwise, mode=like.scaling_mode, shape=(r, c)
    )
    return flat.reshape(like.scale_inv.shape)
