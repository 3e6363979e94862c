"""Quantized tensors: `ScaledTensor1x` (one layout) and `ScaledTensor` (rowwise and/or colwise).

Both are immutable Equinox modules. Gradients follow one convention: the cotangent of a
scaled tensor's `data` is expressed in dequantized units (the units of the original x), so
`jax.grad` through `quantize(x, q).dequantize()` is exactly the identity (the straight-through
estimator). See `dequantize` below and `eqx_quant.quantize`.
"""

import abc
import functools
from typing import Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, Shaped, jaxtyped

from .._core import QuantizeLayout, ScalingMode, with_auto_axes
from .._formats import format_of
from . import _swizzle


def float_dtype_name(dtype) -> str:
    name = jnp.dtype(dtype).name
    if name not in ("float32", "float16", "bfloat16"):
        raise TypeError(
            f"dequantize: dtype must be float32, float16 or bfloat16 (or None for the original "
            f"dtype), got {name}."
        )
    return name


class AbstractScaledTensor(eqx.Module):
    """A quantized tensor that can be dequantized back to its original shape and dtype."""

    @abc.abstractmethod
    def dequantize(self, dtype=None) -> Shaped[Array, "..."]:
        """Return the dequantized array with the original shape, in `dtype` (default: the
        original dtype)."""


@jaxtyped(typechecker=beartype)
class ScaledTensor1x(AbstractScaledTensor):
    """One quantized copy of a tensor, in one layout.

    **Fields:**

    - `data`: the quantized payload in its stored layout: x's shape for `data_layout="N"`,
      `S[fa:] + S[:fa]` for `data_layout="T"` (the transpose of the 2-D view).
    - `scale_inv`: the dequantization scale (for tensor scaling float32 of shape (1,)).
    - `amax`: float32 (1,), the amax observed in x (the global amax for tensor scaling).
    - `scaling_mode`, `data_layout`, `flatten_axis` (non-negative, in x's N layout),
      `ndim` (x's rank), `dq_dtype` (x's dtype name): static metadata.
    - `is_colwise`: whether this is the colwise part (its blocks run along `fa - 1`).
    - `rht_sign_mask`: for an NVFP4 colwise part quantized after the random Hadamard
      transform, its 16-bit sign mask (dequantize undoes the transform); else None.

    Block formats (docs/block_formats.md): MXFP8 `scale_inv` is `float8_e8m0fnu` with the
    blocked axis divided by 32 (the last axis rowwise, axis `flatten_axis - 1` colwise);
    NVFP4 `scale_inv` is `float8_e4m3fn` along the stored layout's last axis, and `amax` is
    the global amax its scales were computed from. MXFP8 needs no tensor amax and computes
    none (as TE): its `amax` is 0.
    """

    data: Shaped[Array, "..."]
    scale_inv: Shaped[Array, "..."]
    amax: Float[Array, "1"]
    scaling_mode: ScalingMode = eqx.field(static=True)
    data_layout: Literal["N", "T"] = eqx.field(static=True)
    flatten_axis: int = eqx.field(static=True)
    ndim: int = eqx.field(static=True)
    dq_dtype: str = eqx.field(static=True)
    rht_sign_mask: int | None = eqx.field(static=True, default=None)
    is_colwise: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        if not 0 <= self.flatten_axis <= self.ndim:
            raise ValueError(
                f"ScaledTensor1x: flatten_axis={self.flatten_axis} is outside [0, {self.ndim}]."
            )

    @property
    def original_shape(self) -> tuple[int, ...]:
        """x's shape (for data with extra leading vmapped dims, of one example)."""
        shape = self.data.shape[self.data.ndim - self.ndim :]
        if self.data_layout == "N":
            return shape
        split = self.ndim - self.flatten_axis
        return shape[split:] + shape[:split]

    @property
    def shape(self) -> tuple[int, ...]:
        """The original tensor's shape (what `dequantize()` returns)."""
        return self.original_shape

    @property
    def dtype(self) -> jnp.dtype:
        """The original tensor's dtype (what `dequantize()` returns by default)."""
        return jnp.dtype(self.dq_dtype)

    def dequantize(self, dtype=None) -> Shaped[Array, "..."]:
        """The values in x's shape: `float32(data) * scale` (per tensor or per block, and for
        NVFP4 times the global scale, undoing the RHT), rounded once to `dtype` (default x's
        dtype) and un-transposed. The gradient is the straight-through identity."""
        dq_dtype = self.dq_dtype if dtype is None else float_dtype_name(dtype)
        meta = PartMeta(
            self.scaling_mode,
            dq_dtype,
            self.data_layout,
            self.flatten_axis,
            self.ndim,
            self.rht_sign_mask,
            self.is_colwise,
        )
        return _dequantize_vjp(self.data, self.scale_inv, self.amax, meta)

    def gemm_scale_inv(self) -> Shaped[Array, "Rp Cp"]:
        """The block scales as cuBLAS takes them (docs/block_formats.md): for MXFP8 and NVFP4
        the 2-D scale matrix padded to (128, 4) multiples with byte 0x00 and laid out in
        cuBLAS's 128x4 tile order; for FP8 block scaling cuBLASLt's float32 layout (1x128:
        transposed, rows padded to 4; 128x128: the last dim padded to 4). Block formats only;
        for one example (call it inside `vmap` for a batch)."""
        return _swizzle.gemm_scale_inv(self)


def _to_original_layout(a, layout, flatten_axis, ndim):
    if layout == "N":
        return a
    lead = a.ndim - ndim
    split = ndim - flatten_axis
    order = tuple(range(lead)) + tuple(lead + i for i in range(split, ndim)) + tuple(
        lead + i for i in range(split)
    )
    return jnp.transpose(a, order)


def _to_stored_layout(a, layout, flatten_axis, ndim):
    if layout == "N":
        return a
    lead = a.ndim - ndim
    order = tuple(range(lead)) + tuple(lead + i for i in range(flatten_axis, ndim)) + tuple(
        lead + i for i in range(flatten_axis)
    )
    return jnp.transpose(a, order)


class PartMeta(NamedTuple):
    scaling_mode: ScalingMode
    dq_dtype: str
    layout: str
    flatten_axis: int
    ndim: int
    rht_sign_mask: int | None
    is_colwise: bool


@functools.partial(jax.jit, static_argnums=3)
def dequantize_stored(data, scale_inv, amax, meta: PartMeta):
    """Dequantize in the stored layout (leading vmapped dims allowed). Jitted: the bit-level
    arithmetic is many small ops, which eager dispatch would compile one by one. Under
    Explicit mesh axes the block reshapes run as under Auto axes; the result has data's
    sharding."""
    body = functools.partial(_dequantize_body, meta=meta)
    return with_auto_axes(body, like=data)(data, scale_inv, amax)


def _dequantize_body(data, scale_inv, amax, meta: PartMeta):
    return format_of(meta.scaling_mode).dequantize(data, scale_inv, amax, meta)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _dequantize_vjp(data, scale_inv, amax, meta: PartMeta):
    y = dequantize_stored(data, scale_inv, amax, meta)
    return _to_original_layout(y, meta.layout, meta.flatten_axis, meta.ndim)


def _dequantize_fwd(data, scale_inv, amax, meta):
    return _dequantize_vjp(data, scale_inv, amax, meta), (scale_inv, amax)


def _dequantize_bwd(meta, res, ct):
    scale_inv, amax = res
    # Straight-through: the data cotangent is the output cotangent, in dequantized units
    # and full precision (not rounded to the payload dtype), moved to the stored layout.
    ct_data = _to_stored_layout(ct, meta.layout, meta.flatten_axis, meta.ndim)
    return ct_data, jnp.zeros_like(scale_inv), jnp.zeros_like(amax)


_dequantize_vjp.defvjp(_dequantize_fwd, _dequantize_bwd)


class AbstractLayoutPair(AbstractScaledTensor):
    """A rowwise and/or a colwise part of one tensor (at least one of the two)."""

    rowwise: eqx.AbstractVar[AbstractScaledTensor | None]
    colwise: eqx.AbstractVar[AbstractScaledTensor | None]

    def __check_init__(self):
        if self.rowwise is None and self.colwise is None:
            raise ValueError(
                f"{type(self).__name__}: at least one of rowwise / colwise must be given."
            )

    @property
    def _first(self):
        return self.rowwise if self.rowwise is not None else self.colwise

    @property
    def scaling_mode(self) -> ScalingMode:
        return self._first.scaling_mode

    @property
    def q_layout(self) -> QuantizeLayout:
        if self.rowwise is not None and self.colwise is not None:
            return QuantizeLayout.ROWWISE_COLWISE
        return QuantizeLayout.ROWWISE if self.rowwise is not None else QuantizeLayout.COLWISE

    @property
    def shape(self) -> tuple[int, ...]:
        """The original tensor's shape."""
        return self._first.shape

    @property
    def dtype(self) -> jnp.dtype:
        """The original tensor's dtype."""
        return self._first.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dequantize(self, dtype=None) -> Shaped[Array, "..."]:
        """Dequantize the rowwise part (or the colwise one if there is no rowwise part), to
        `dtype` (default: the original dtype)."""
        return self._first.dequantize(dtype)


@jaxtyped(typechecker=beartype)
class ScaledTensor(AbstractLayoutPair):
    """The result of `eqx_quant.quantize`: a rowwise and/or a colwise `ScaledTensor1x`.

    **Fields:**

    - `rowwise`: the rowwise copy, or None if the layout did not ask for it.
    - `colwise`: the colwise copy, or None.
    """

    rowwise: ScaledTensor1x | None
    colwise: ScaledTensor1x | None

    @property
    def amax(self) -> Float[Array, "1"]:
        """The amax observed in x (float32, shape (1,))."""
        return self._first.amax
