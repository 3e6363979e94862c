"""Quantized tensors: `ScaledTensor1x` (one layout) and `ScaledTensor` (rowwise and/or colwise).

Both are immutable Equinox modules. Gradients follow one convention: the cotangent of a
scaled tensor's `data` is expressed in dequantized units (the units of the original x), so
`jax.grad` through `quantize(x, q).dequantize()` is exactly the identity (the straight-through
estimator). See `dequantize` below and `eqx_quant.quantize`.
"""

import abc
import functools
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, Shaped, jaxtyped

from . import reference
from ._enums import QuantizeLayout, ScalingMode


class AbstractScaledTensor(eqx.Module):
    """A quantized tensor that can be dequantized back to its original shape and dtype."""

    @abc.abstractmethod
    def dequantize(self) -> Shaped[Array, "..."]:
        """Return the dequantized array with the original shape and dtype."""


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
    """

    data: Shaped[Array, "..."]
    scale_inv: Shaped[Array, "..."]
    amax: Float[Array, "1"]
    scaling_mode: ScalingMode = eqx.field(static=True)
    data_layout: Literal["N", "T"] = eqx.field(static=True)
    flatten_axis: int = eqx.field(static=True)
    ndim: int = eqx.field(static=True)
    dq_dtype: str = eqx.field(static=True)

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

    def dequantize(self) -> Shaped[Array, "..."]:
        """`float32(data) * scale_inv`, cast to x's dtype and un-transposed to x's shape."""
        return _dequantize(self)


def _dequantize(t: ScaledTensor1x) -> Array:
    return _dequantize_vjp(
        t.data, t.scale_inv, t.amax, t.dq_dtype, t.data_layout, t.flatten_axis, t.ndim
    )


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


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6))
def _dequantize_vjp(data, scale_inv, amax, dq_dtype, layout, flatten_axis, ndim):
    del amax
    # Per-example scale_inv (..., 1) broadcast over the example's dims.
    lead = scale_inv.shape[:-1]
    s = scale_inv.reshape(lead + (1,) * ndim)
    y = reference.cast_canonical(reference.multiply(data.astype(jnp.float32), s), dq_dtype)
    return _to_original_layout(y, layout, flatten_axis, ndim)


def _dequantize_fwd(data, scale_inv, amax, dq_dtype, layout, flatten_axis, ndim):
    out = _dequantize_vjp(data, scale_inv, amax, dq_dtype, layout, flatten_axis, ndim)
    return out, (scale_inv, amax)


def _dequantize_bwd(dq_dtype, layout, flatten_axis, ndim, res, ct):
    scale_inv, amax = res
    # Straight-through: the data cotangent is the output cotangent, in dequantized units
    # and full precision (not rounded to the fp8 dtype), moved to the stored layout.
    ct_data = _to_stored_layout(ct, layout, flatten_axis, ndim)
    return ct_data, jnp.zeros_like(scale_inv), jnp.zeros_like(amax)


_dequantize_vjp.defvjp(_dequantize_fwd, _dequantize_bwd)


@jaxtyped(typechecker=beartype)
class ScaledTensor(AbstractScaledTensor):
    """The result of `eqx_quant.quantize`: a rowwise and/or a colwise `ScaledTensor1x`.

    **Fields:**

    - `rowwise`: the rowwise copy, or None if the layout did not ask for it.
    - `colwise`: the colwise copy, or None.
    """

    rowwise: ScaledTensor1x | None
    colwise: ScaledTensor1x | None

    def __check_init__(self):
        if self.rowwise is None and self.colwise is None:
            raise ValueError("ScaledTensor: at least one of rowwise / colwise must be given.")

    @property
    def _first(self) -> ScaledTensor1x:
        return self.rowwise if self.rowwise is not None else self.colwise  # type: ignore[return-value]

    @property
    def amax(self) -> Float[Array, "1"]:
        """The amax observed in x (float32, shape (1,))."""
        return self._first.amax

    @property
    def scaling_mode(self) -> ScalingMode:
        return self._first.scaling_mode

    @property
    def q_layout(self) -> QuantizeLayout:
        if self.rowwise is not None and self.colwise is not None:
            return QuantizeLayout.ROWWISE_COLWISE
        return QuantizeLayout.ROWWISE if self.rowwise is not None else QuantizeLayout.COLWISE

    def dequantize(self) -> Shaped[Array, "..."]:
        """Dequantize the rowwise copy (or the colwise one if there is no rowwise copy)."""
        return self._first.dequantize()
