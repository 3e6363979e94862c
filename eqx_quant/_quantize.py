"""Public quantize / quantize_dbias for per-tensor FP8 scaling (delayed and current)."""

import dataclasses
import functools
from collections.abc import Sequence
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jax import lax
from jaxtyping import Array, Shaped, jaxtyped

from . import reference
from ._checks import validated_by
from ._custom_types import HighPrecision
from ._enums import QuantizeLayout
from ._ops.fp8_quantize import Fp8QuantizeParams, fp8_quantize_op
from ._quantizer import AbstractQuantizer, AbstractTensorScaleQuantizer
from ._tensor import ScaledTensor, ScaledTensor1x


Impl = Literal["auto", "ffi", "reference"]
_HIGH_PRECISION = ("float32", "float16", "bfloat16")


def _check_inputs(fn: str, x, quantizer, flatten_axis, amax_axes, impl) -> int:
    """Trace-time validation with messages that name the argument and the fix."""
    if not isinstance(x, jax.Array):
        raise TypeError(f"{fn}: x must be a jax.Array, got {type(x).__name__}. Use jnp.asarray(x).")
    if x.dtype.name not in _HIGH_PRECISION:
        raise TypeError(
            f"{fn}: x must be float32, float16 or bfloat16, got dtype {x.dtype.name} with shape "
            f"{x.shape}. Cast it first, e.g. x.astype(jnp.bfloat16)."
        )
    if x.ndim == 0:
        raise ValueError(f"{fn}: x must have at least one dimension, got a scalar. Use x.reshape(1).")
    if not isinstance(quantizer, AbstractQuantizer):
        raise TypeError(
            f"{fn}: quantizer must be an eqx_quant quantizer (e.g. eqx_quant.CurrentScaleQuantizer()),"
            f" got {type(quantizer).__name__}."
        )
    if not isinstance(quantizer, AbstractTensorScaleQuantizer):
        raise NotImplementedError(
            f"{fn}: {type(quantizer).__name__} is not supported yet; only per-tensor FP8 scaling "
            "(CurrentScaleQuantizer, DelayedScaleQuantizer) is implemented in this version."
        )
    if not isinstance(flatten_axis, int) or isinstance(flatten_axis, bool):
        raise TypeError(f"{fn}: flatten_axis must be an int, got {flatten_axis!r}.")
    if not -x.ndim <= flatten_axis < x.ndim:
        raise ValueError(
            f"{fn}: flatten_axis={flatten_axis} is out of range for x of rank {x.ndim} (shape "
            f"{x.shape}); it must be in [{-x.ndim}, {x.ndim - 1}]. The 2-D view is "
            "(prod(shape[:flatten_axis]), prod(shape[flatten_axis:])); -1 is the usual choice."
        )
    if impl not in ("auto", "ffi", "reference"):
        raise ValueError(f"{fn}: impl must be 'auto', 'ffi' or 'reference', got {impl!r}.")
    if isinstance(amax_axes, str) or not all(isinstance(a, str) for a in amax_axes):
        raise TypeError(
            f"{fn}: amax_axes must be a tuple of mesh axis names, got {amax_axes!r}. Write "
            "amax_axes=('tp',) rather than amax_axes='tp'."
        )
    return flatten_axis % x.ndim


@dataclasses.dataclass(frozen=True)
class _Config:
    """Everything static about one quantize call (hashable: it keys the custom_vjp)."""

    quantizer_static: AbstractQuantizer
    flatten_axis: int
    amax_axes: tuple[str, ...]
    impl: str
    with_dbias: bool
    x_shape: tuple[int, ...]
    x_dtype: str


def _forward(config: _Config, x: Array, quantizer_arrays) -> tuple[ScaledTensor, Array]:
    quantizer = eqx.combine(quantizer_arrays, config.quantizer_static)
    layout = quantizer.q_layout
    observed = None
    if quantizer.needs_amax_first:
        observed = reference.amax(x)
        if config.amax_axes:
            observed = lax.pmax(observed, config.amax_axes)
    scale = quantizer.scale_for(observed)
    params = Fp8QuantizeParams(
        q_dtype=quantizer.q_dtype,
        flatten_axis=config.flatten_axis,
        rowwise=layout.has_rowwise,
        colwise=layout.has_colwise,
        with_dbias=config.with_dbias,
        impl=config.impl,
    )
    row, col, scale_inv, kernel_amax, dbias = fp8_quantize_op.bind(x, scale, params=params)
    if observed is None:
        observed = lax.pmax(kernel_amax, config.amax_axes) if config.amax_axes else kernel_amax
    part = functools.partial(
        ScaledTensor1x,
        scale_inv=scale_inv,
        amax=observed,
        scaling_mode=quantizer.scaling_mode,
        flatten_axis=config.flatten_axis,
        ndim=x.ndim,
        dq_dtype=x.dtype.name,
    )
    tensor = ScaledTensor(
        rowwise=part(data=row, data_layout="N") if layout.has_rowwise else None,
        colwise=part(data=col, data_layout="T") if layout.has_colwise else None,
    )
    dbias = reference.cast_canonical(dbias, x.dtype) if config.with_dbias else None
    return tensor, dbias


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _quantize_ste(config, x, quantizer_arrays):
    return _forward(config, x, quantizer_arrays)


def _quantize_ste_fwd(config, x, quantizer_arrays):
    return _forward(config, x, quantizer_arrays), quantizer_arrays


def _quantize_ste_bwd(config, residuals, cotangents):
    quantizer_arrays = residuals
    shape, dtype = config.x_shape, config.x_dtype
    ct_tensor, ct_dbias = cotangents
    dx = jnp.zeros(shape, jnp.float32)
    if ct_tensor.rowwise is not None:
        dx = dx + ct_tensor.rowwise.data.astype(jnp.float32)
    if ct_tensor.colwise is not None:
        dx = dx + reference.untranspose_2d(ct_tensor.colwise.data, config.flatten_axis).astype(
            jnp.float32
        )
    if ct_dbias is not None:
        reduced = (1,) * config.flatten_axis + shape[config.flatten_axis :]
        dx = dx + ct_dbias.astype(jnp.float32).reshape(reduced)
    zeros = jax.tree.map(jnp.zeros_like, quantizer_arrays)
    return dx.astype(dtype), zeros


_quantize_ste.defvjp(_quantize_ste_fwd, _quantize_ste_bwd)


def _run(fn, x, quantizer, flatten_axis, amax_axes, impl, with_dbias):
    fa = _check_inputs(fn, x, quantizer, flatten_axis, amax_axes, impl)
    arrays, static = eqx.partition(quantizer, eqx.is_array)
    config = _Config(static, fa, tuple(amax_axes), impl, with_dbias, x.shape, x.dtype.name)
    return _quantize_ste(config, x, arrays)


def _check_quantize(x, quantizer, flatten_axis, amax_axes, impl):
    _check_inputs("quantize", x, quantizer, flatten_axis, amax_axes, impl)


def _check_quantize_dbias(dx, quantizer, flatten_axis, amax_axes, impl):
    _check_inputs("quantize_dbias", dx, quantizer, flatten_axis, amax_axes, impl)


@validated_by(_check_quantize)
@jaxtyped(typechecker=beartype)
def quantize(
    x: HighPrecision[Array, "..."],
    quantizer: AbstractQuantizer,
    flatten_axis: int = -1,
    *,
    amax_axes: Sequence[str] = (),
    impl: Impl = "auto",
) -> ScaledTensor:
    """Quantize `x` with `quantizer`.

    **Arguments:**

    - `x`: float32, float16 or bfloat16 array of any rank >= 1.
    - `quantizer`: e.g. `eqx_quant.CurrentScaleQuantizer()` or a `DelayedScaleQuantizer`.
    - `flatten_axis`: splits x into the 2-D view `(prod(S[:fa]), prod(S[fa:]))` that the
      colwise (transposed) copy is built from. Default -1.
    - `amax_axes`: inside `shard_map`, the mesh axes to reduce the amax over (e.g. `("tp",)`);
      by default the amax is local to the device there. Under sharded `jit` the amax is always
      global, so results equal the unsharded call bit for bit.
    - `impl`: `"auto"` (the compiled kernel for the platform), `"ffi"` (the same, explicitly) or
      `"reference"` (pure JAX). A missing kernel raises; nothing falls back silently.

    **Returns:** a `ScaledTensor` with `.rowwise` / `.colwise` (None where not requested).

    `jax.grad` through `quantize(x, q).dequantize()` is the identity (straight-through). Under
    `jax.vmap` each example gets its own amax and scale.
    """
    tensor, _ = _run("quantize", x, quantizer, flatten_axis, amax_axes, impl, False)
    return tensor


@validated_by(_check_quantize_dbias)
@jaxtyped(typechecker=beartype)
def quantize_dbias(
    dx: HighPrecision[Array, "..."],
    quantizer: AbstractQuantizer,
    flatten_axis: int = -1,
    *,
    amax_axes: Sequence[str] = (),
    impl: Impl = "auto",
) -> tuple[ScaledTensor, Shaped[Array, "..."]]:
    """Quantize a gradient `dx` and compute its bias gradient in the same pass.

    `dbias` is the float32 sum of `dx` over the axes before `flatten_axis`, in the canonical
    pairwise-tree order (bit-identical under any sharding), cast to `dx`'s dtype; its shape
    is `dx.shape[flatten_axis:]`. Inside `shard_map` dbias is the local sum. Other arguments
    as in `quantize`.
    """
    return _run("quantize_dbias", dx, quantizer, flatten_axis, amax_axes, impl, True)
