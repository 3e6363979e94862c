"""Public quantize / quantize_dbias for per-tensor FP8 scaling (delayed and current)."""

import dataclasses
import functools
from collections.abc import Sequence
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, PRNGKeyArray, Shaped, jaxtyped

from . import _quantize_blocks, reference
from ._checks import validated_by
from ._custom_types import HighPrecision
from ._explicit import explicit_sharding
from ._ops._sharding import pmax_amax
from ._ops.fp8_quantize import Fp8QuantizeParams, fp8_quantize_op
from ._quantizer import (
    AbstractBlockQuantizer,
    AbstractQuantizer,
    AbstractTensorScaleQuantizer,
    BlockScaleQuantizer,
    DelayedScaleQuantizer,
    GroupedDelayedScaleQuantizer,
)
from ._quantizer._delayed import holds_stack
from ._tensor import ScaledTensor, ScaledTensor1x


Impl = Literal["auto", "ffi", "reference"]
_HIGH_PRECISION = ("float32", "float16", "bfloat16")


def _check_inputs(fn: str, x, quantizer, flatten_axis, amax_axes, impl, key=None) -> int:
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
    check_amax_axes(fn, amax_axes)
    fa = flatten_axis % x.ndim
    if isinstance(quantizer, AbstractBlockQuantizer):
        _check_block_shape(fn, x, quantizer, fa)
    _check_key(fn, quantizer, key)
    return fa


def check_amax_axes(fn: str, amax_axes) -> None:
    """A tuple of names of mesh axes that the enclosing shard_map binds."""
    if isinstance(amax_axes, str) or not all(isinstance(a, str) for a in amax_axes):
        raise TypeError(
            f"{fn}: amax_axes must be a tuple of mesh axis names, got {amax_axes!r}. Write "
            "amax_axes=('tp',) rather than amax_axes='tp'."
        )
    _check_axes_bound(fn, amax_axes)


def _check_axes_bound(fn: str, amax_axes) -> None:
    """Every name in amax_axes must be a mesh axis of the enclosing shard_map."""
    for name in amax_axes:
        try:
            jax.lax.axis_size(name)
        except NameError:
            raise ValueError(
                f"{fn}: amax_axes names the axis {name!r}, which is not bound here. amax_axes is "
                "for code inside jax.shard_map whose mesh has that axis; under sharded jit the "
                "amax is already global, so drop amax_axes there."
            ) from None


def _check_quantizer_state(fn: str, quantizer) -> None:
    """One tensor's quantizer: not a grouped one, not a stack of states (e.g. one per layer)."""
    if isinstance(quantizer, GroupedDelayedScaleQuantizer):
        raise TypeError(
            f"{fn}: a GroupedDelayedScaleQuantizer holds one scale per group and quantizes "
            "grouped inputs: use eqx_quant.grouped_quantize, or quantizer.group(g) (a "
            "DelayedScaleQuantizer) for one dense tensor."
        )
    if isinstance(quantizer, DelayedScaleQuantizer) and holds_stack(quantizer):
        raise ValueError(
            f"{fn}: the DelayedScaleQuantizer holds a stack of states (scale of shape "
            f"{quantizer.scale.shape}, amax_history of shape {quantizer.amax_history.shape}), "
            "e.g. one per layer built with jax.vmap. Quantize inside jax.vmap or jax.lax.scan "
            "over the stack, or take one state with jax.tree.map(lambda a: a[i], quantizer)."
        )


def _check_block_shape(fn: str, x, quantizer, fa: int) -> None:
    name = type(quantizer).__name__
    needs_axis = quantizer.q_layout.has_colwise or getattr(quantizer, "use_2d", False)
    if needs_axis and fa == 0:
        raise ValueError(
            f"{fn}: {name} with q_layout={quantizer.q_layout.name} blocks the colwise part along "
            f"axis flatten_axis - 1, but flatten_axis resolves to 0 for x of shape {x.shape}. "
            "Pass flatten_axis >= 1 (e.g. reshape a 1-D x to (1, n)) or use QuantizeLayout.ROWWISE."
        )
    if getattr(quantizer, "use_rht", False) and x.shape[fa - 1] % 16:
        raise ValueError(
            f"{fn}: {name}(use_rht=True) transforms groups of 16 along axis {fa - 1} (flatten_axis "
            f"- 1) of x, whose length is {x.shape[fa - 1]} (x.shape={x.shape}), not a multiple of "
            "16. Pad that axis to a multiple of 16 or use use_rht=False."
        )


def _check_key(fn: str, quantizer, key) -> None:
    sr = getattr(quantizer, "stochastic_rounding", False)
    if sr and key is None:
        raise ValueError(
            f"{fn}: {type(quantizer).__name__}(stochastic_rounding=True) needs random bits: pass "
            "key=jax.random.key(seed) (a new key per step gives new rounding noise)."
        )
    if not sr and key is not None:
        raise ValueError(
            f"{fn}: key was given but {type(quantizer).__name__} does not use stochastic "
            "rounding. Drop key, or use NVFP4Quantizer(stochastic_rounding=True)."
        )
    if key is not None:
        _key_words(fn, key)


def _key_words(fn: str, key) -> Array:
    """The two uint32 words of a threefry key (typed `jax.random.key` or raw `PRNGKey`)."""
    if not isinstance(key, jax.Array):
        raise TypeError(f"{fn}: key must be a jax.random.key, got {type(key).__name__}.")
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        words = jax.random.key_data(key)
    else:
        words = key
    if words.dtype != jnp.uint32 or words.shape != (2,):
        raise TypeError(
            f"{fn}: key must be a scalar threefry key (jax.random.key(seed), key data uint32[2]); "
            f"got key data of dtype {words.dtype} and shape {words.shape}. Other generators "
            "(rbg, unsafe_rbg) are not supported: their keys have other shapes."
        )
    return words


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


@functools.partial(jax.jit, static_argnums=0)
def _forward(config: _Config, x: Array, quantizer_arrays, key_words):
    """Jitted so that an eager call compiles once, not op by op."""
    quantizer = eqx.combine(quantizer_arrays, config.quantizer_static)
    if isinstance(quantizer, AbstractTensorScaleQuantizer):
        return _tensor_scaling_forward(config, x, quantizer)
    fa, impl = config.flatten_axis, config.impl
    if isinstance(quantizer, BlockScaleQuantizer):
        return _quantize_blocks.mxfp8(x, quantizer, fa, impl, config.with_dbias)
    tensor = _quantize_blocks.nvfp4(x, quantizer, fa, impl, config.amax_axes, key_words)
    dbias = _quantize_blocks.dbias(x, fa, impl) if config.with_dbias else None
    return tensor, dbias


def _tensor_scaling_forward(config: _Config, x: Array, quantizer) -> tuple[ScaledTensor, Array]:
    layout = quantizer.q_layout
    observed = None
    # Current scaling runs inside the op (amax, scale and cast in the kernel's launches; under
    # sharded jit the op's partition makes the amax global first). Inside shard_map with
    # amax_axes the amax is reduced here, across the named axes, before the op.
    in_op = quantizer.needs_amax_first and not config.amax_axes
    if in_op:
        scale = quantizer.scale_fallback()
    else:
        if quantizer.needs_amax_first:
            observed = pmax_amax(reference.amax(x), config.amax_axes)
        scale = quantizer.scale_for(observed)
    params = Fp8QuantizeParams(
        q_dtype=quantizer.q_dtype,
        flatten_axis=config.flatten_axis,
        rowwise=layout.has_rowwise,
        colwise=layout.has_colwise,
        with_dbias=config.with_dbias,
        impl=config.impl,
        scale_from_amax=in_op,
    )
    row, col, scale_inv, kernel_amax, dbias = fp8_quantize_op.bind(x, scale, params=params)
    if observed is None:
        observed = pmax_amax(kernel_amax, config.amax_axes)
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
        colwise=part(data=col, data_layout="T", is_colwise=True) if layout.has_colwise else None,
    )
    return tensor, dbias if config.with_dbias else None


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
    zeros = jax.tree.map(jnp.zeros_like, quantizer_arrays)
    return dx.astype(dtype), zeros, None


_quantize_ste.defvjp(_quantize_ste_fwd, _quantize_ste_bwd)


def _run(fn, x, quantizer, flatten_axis, amax_axes, impl, with_dbias, key):
    fa = _check_inputs(fn, x, quantizer, flatten_axis, amax_axes, impl, key)
    arrays, static = eqx.partition(quantizer, eqx.is_array)
    config = _Config(
        static, fa, tuple(amax_axes), impl, with_dbias, x.shape, x.dtype.name,
        explicit_sharding(x),
    )
    key_words = None if key is None else _key_words(fn, key)
    return _quantize_ste(config, x, arrays, key_words)


def _check_quantize(x, quantizer, flatten_axis, key, amax_axes, impl):
    _check_inputs("quantize", x, quantizer, flatten_axis, amax_axes, impl, key)
    _check_quantizer_state("quantize", quantizer)


def _check_quantize_dbias(dx, quantizer, flatten_axis, key, amax_axes, impl):
    _check_inputs("quantize_dbias", dx, quantizer, flatten_axis, amax_axes, impl, key)
    _check_quantizer_state("quantize_dbias", quantizer)


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
