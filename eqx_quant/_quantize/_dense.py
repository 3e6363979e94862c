"""Public quantize / quantize_dbias: one front end for every scaling mode (the format of the
quantizer's mode runs the op and says how its outputs become parts)."""

import dataclasses
import functools
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, PRNGKeyArray, Shaped, jaxtyped

from .. import reference
from .._core import HighPrecision, explicit_sharding, validated_by, vary_like, varying_axes
from .._formats import format_of
from .._quantizer import AbstractQuantizer
from .._tensor import ScaledTensor, ScaledTensor1x
from ._checks import Impl, check_inputs, check_quantizer_state, key_words_of


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
    x_sharding: jax.sharding.NamedSharding | None  # in x's type (Explicit axes), else None
    x_vma: tuple[str, ...]  # the manual axes x varies over (inside shard_map)


@functools.partial(jax.jit, static_argnums=0)
def _forward(config: _Config, x: Array, quantizer_arrays, key_words):
    """Jitted so that an eager call compiles once, not op by op."""
    quantizer = eqx.combine(quantizer_arrays, config.quantizer_static)
    out = format_of(quantizer.scaling_mode).quantize(
        x,
        quantizer,
        flatten_axis=config.flatten_axis,
        impl=config.impl,
        amax_axes=config.amax_axes,
        key_words=key_words,
        with_dbias=config.with_dbias,
    )
    part = functools.partial(
        ScaledTensor1x,
        scaling_mode=quantizer.scaling_mode,
        flatten_axis=config.flatten_axis,
        ndim=x.ndim,
        dq_dtype=x.dtype.name,
    )
    tensor = ScaledTensor(
        rowwise=None if out.rowwise is None else part(**out.rowwise._asdict()),
        colwise=None if out.colwise is None else part(**out.colwise._asdict()),
    )
    return tensor, out.dbias


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _quantize_ste(config, x, quantizer_arrays, key_words):
    return _forward(config, x, quantizer_arrays, key_words)


def _quantize_ste_fwd(config, x, quantizer_arrays, key_words):
    return _forward(config, x, quantizer_arrays, key_words), quantizer_arrays


def _quantize_ste_bwd(config, residuals, cotangents):
    quantizer_arrays = residuals
    shape, dtype = config.x_shape, config.x_dtype
    ct_tensor, ct_dbias = cotangents
    dx = jnp.zeros(shape, jnp.float32)
    if ct_tensor.rowwise is not None:
        dx = dx + ct_tensor.rowwise.data.astype(jnp.float32)
    if ct_tensor.colwise is not None:
        ct_col = ct_tensor.colwise.data
        if ct_tensor.colwise.data_layout == "T":
            ct_col = reference.untranspose_2d(ct_col, config.flatten_axis)
        dx = dx + ct_col.astype(jnp.float32)
    if ct_dbias is not None:
        reduced = (1,) * config.flatten_axis + shape[config.flatten_axis :]
        dx = dx + ct_dbias.astype(jnp.float32).reshape(reduced)
    if config.x_sharding is not None:  # Explicit axes: the cotangent is typed like x
        dx = jax.sharding.reshard(dx, config.x_sharding)
    dx = vary_like(dx.astype(dtype), config.x_vma)
    zeros = jax.tree.map(lambda a: vary_like(jnp.zeros_like(a), varying_axes(a)), quantizer_arrays)
    return dx, zeros, None


_quantize_ste.defvjp(_quantize_ste_fwd, _quantize_ste_bwd)


def _run(fn, x, quantizer, flatten_axis, amax_axes, impl, with_dbias, key):
    fa = check_inputs(fn, x, quantizer, flatten_axis, amax_axes, impl, key)
    arrays, static = eqx.partition(quantizer, eqx.is_array)
    config = _Config(
        static, fa, tuple(amax_axes), impl, with_dbias, x.shape, x.dtype.name,
        explicit_sharding(x), varying_axes(x),
    )
    key_words = None if key is None else key_words_of(fn, key)
    return _quantize_ste(config, x, arrays, key_words)


def _check_quantize(x, quantizer, flatten_axis, key, amax_axes, impl):
    check_inputs("quantize", x, quantizer, flatten_axis, amax_axes, impl, key)
    check_quantizer_state("quantize", quantizer)


def _check_quantize_dbias(dx, quantizer, flatten_axis, key, amax_axes, impl):
    check_inputs("quantize_dbias", dx, quantizer, flatten_axis, amax_axes, impl, key)
    check_quantizer_state("quantize_dbias", quantizer)


@validated_by(_check_quantize)
@jaxtyped(typechecker=beartype)
def quantize(
    x: HighPrecision[Array, "..."],
    quantizer: AbstractQuantizer,
    flatten_axis: int = -1,
    *,
    key: PRNGKeyArray | None = None,
    amax_axes: Sequence[str] = (),
    impl: Impl = "auto",
) -> ScaledTensor:
    """Quantize `x` with `quantizer`.

    **Arguments:**

    - `x`: float32, float16 or bfloat16 array of any rank >= 1.
    - `quantizer`: e.g. `eqx_quant.CurrentScaleQuantizer()` or a `DelayedScaleQuantizer`.
    - `flatten_axis`: splits x into the 2-D view `(prod(S[:fa]), prod(S[fa:]))` that the
      colwise (transposed) copy is built from. Default -1.
    - `key`: a `jax.random.key`, required when the quantizer rounds stochastically
      (`NVFP4Quantizer(stochastic_rounding=True)`) and rejected otherwise; the random bits of
      each element depend only on the key and the element's index, so they are the same on
      every backend and mesh.
    - `amax_axes`: inside `shard_map`, the mesh axes to reduce the amax over (e.g. `("tp",)`);
      by default the amax is local to the device there. Under sharded `jit` the amax is always
      global, so results equal the unsharded call bit for bit.
    - `impl`: `"auto"` (the compiled kernel for the platform), `"ffi"` (the same, explicitly) or
      `"reference"` (pure JAX). A missing kernel raises; nothing falls back silently.

    **Returns:** a `ScaledTensor` with `.rowwise` / `.colwise` (None where not requested).

    `jax.grad` through `quantize(x, q).dequantize()` is the identity (straight-through). Under
    `jax.vmap` each example gets its own amax and scale.
    """
    tensor, _ = _run("quantize", x, quantizer, flatten_axis, amax_axes, impl, False, key)
    return tensor


@validated_by(_check_quantize_dbias)
@jaxtyped(typechecker=beartype)
def quantize_dbias(
    dx: HighPrecision[Array, "..."],
    quantizer: AbstractQuantizer,
    flatten_axis: int = -1,
    *,
    key: PRNGKeyArray | None = None,
    amax_axes: Sequence[str] = (),
    impl: Impl = "auto",
) -> tuple[ScaledTensor, Shaped[Array, "..."]]:
    """Quantize a gradient `dx` and compute its bias gradient in the same pass.

    `dbias` is the float32 sum of `dx` over the axes before `flatten_axis`, in the canonical
    pairwise-tree order (bit-identical under any sharding), cast to `dx`'s dtype; its shape
    is `dx.shape[flatten_axis:]`. Inside `shard_map` dbias is the local sum. Other arguments
    as in `quantize`.
    """
    return _run("quantize_dbias", dx, quantizer, flatten_axis, amax_axes, impl, True, key)
