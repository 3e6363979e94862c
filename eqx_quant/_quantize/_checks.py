"""Every argument check that the quantize front ends share (trace time, with messages that
name the argument and the fix)."""

from typing import Literal

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._quantizer import (
    AbstractBlockQuantizer,
    AbstractQuantizer,
    BlockScaleQuantizer,
    CurrentScaleQuantizer,
    DelayedScaleQuantizer,
    Float8BlockQuantizer,
    GroupedDelayedScaleQuantizer,
    NVFP4Quantizer,
    holds_stack,
)

Impl = Literal["auto", "ffi", "reference"]
_HIGH_PRECISION = ("float32", "float16", "bfloat16")


def check_inputs(fn: str, x, quantizer, flatten_axis, amax_axes, impl, key=None) -> int:
    """Trace-time validation with messages that name the argument and the fix."""
    if not isinstance(x, jax.Array):
        raise TypeError(f"{fn}: x must be a jax.Array, got {type(x).__name__}. Use jnp.asarray(x).")
    if x.dtype.name not in _HIGH_PRECISION:
        raise TypeError(
            f"{fn}: x must be float32, float16 or bfloat16, got dtype {x.dtype.name} with shape "
            f"{x.shape}. Cast it first, e.g. x.astype(jnp.bfloat16)."
        )
    if x.ndim == 0:
        raise ValueError(
            f"{fn}: x must have at least one dimension, got a scalar. Use x.reshape(1)."
        )
    if not isinstance(quantizer, AbstractQuantizer):
        raise TypeError(
            f"{fn}: quantizer must be an eqx_quant quantizer"
            f" (e.g. eqx_quant.CurrentScaleQuantizer()),"
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
        check_block_shape(fn, x, quantizer, fa)
    _check_key(fn, quantizer, key)
    return fa


def check_amax_axes(fn: str, amax_axes) -> None:
    """A tuple of names of mesh axes that the enclosing shard_map binds."""
    if (
        isinstance(amax_axes, str)
        or not isinstance(amax_axes, tuple | list)
        or not all(isinstance(a, str) for a in amax_axes)
    ):
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


def check_quantizer_state(fn: str, quantizer) -> None:
    """One tensor's quantizer: not a grouped one, not a stack of states (e.g. one per layer)."""
    if isinstance(quantizer, GroupedDelayedScaleQuantizer):
        raise TypeError(
            f"{fn}: a GroupedDelayedScaleQuantizer holds one scale per group and quantizes "
            "grouped inputs: use eqx_quant.grouped_quantize, or quantizer.group(g) (a "
            "DelayedScaleQuantizer) for one dense tensor."
        )
    if isinstance(quantizer, DelayedScaleQuantizer) and (
        quantizer.scale.ndim == 1 and quantizer.scale.shape != (1,)
        or quantizer.amax_history.ndim == 1 and quantizer.scale.ndim != 1
    ):
        raise ValueError(
            f"{fn}: the DelayedScaleQuantizer's scale must have shape (1,) (one float32 per "
            f"tensor) and its amax_history shape (L,), got scale {quantizer.scale.shape} and "
            f"amax_history {quantizer.amax_history.shape} (set with eqx.tree_at?). Build it "
            "with DelayedScaleQuantizer(scale=jnp.asarray([s], jnp.float32))."
        )
    if isinstance(quantizer, DelayedScaleQuantizer) and holds_stack(quantizer):
        raise ValueError(
            f"{fn}: the DelayedScaleQuantizer holds a stack of states (scale of shape "
            f"{quantizer.scale.shape}, amax_history of shape {quantizer.amax_history.shape}), "
            "e.g. one per layer built with jax.vmap. Quantize inside jax.vmap or jax.lax.scan "
            "over the stack, or take one state with jax.tree.map(lambda a: a[i], quantizer)."
        )


def check_block_shape(fn: str, x, quantizer, fa: int) -> None:
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
        key_words_of(fn, key)


def key_words_of(fn: str, key) -> Array:
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


def check_group_sizes(fn: str, x, group_sizes) -> int:
    """Validate `group_sizes` against x; returns G."""
    if group_sizes is None:
        if x.ndim < 3:
            raise ValueError(
                f"{fn}: group_sizes=None means one group per leading index of a weight-like x "
                f"of shape [G, K, N] (rank >= 3), but x has shape {x.shape}. Pass group_sizes "
                "(int32, one entry per group) for a token matrix."
            )
        return x.shape[0]
    if not isinstance(group_sizes, jax.Array):
        raise TypeError(
            f"{fn}: group_sizes must be a jax.Array of int32, got {type(group_sizes).__name__}. "
            "Use jnp.asarray(sizes, jnp.int32)."
        )
    if group_sizes.dtype != jnp.int32:
        raise TypeError(
            f"{fn}: group_sizes must have dtype int32, got {group_sizes.dtype} (shape "
            f"{group_sizes.shape}). Use group_sizes.astype(jnp.int32)."
        )
    if group_sizes.ndim != 1 or group_sizes.shape[0] < 1:
        raise ValueError(
            f"{fn}: group_sizes must be 1-D with one entry per group (G >= 1), got shape "
            f"{group_sizes.shape}. Under vmap, map over a leading axis of group_sizes."
        )
    return group_sizes.shape[0]


def check_token_matrix(fn: str, name: str, x) -> None:
    """`x` (called `name`) must be an array [M, ...] whose axis 0 the groups split."""
    if not isinstance(x, jax.Array):
        raise TypeError(
            f"{fn}: {name} must be a jax.Array, got {type(x).__name__}. Use jnp.asarray({name})."
        )
    if x.ndim < 2:
        raise ValueError(
            f"{fn}: {name} must have rank >= 2 (groups are ranges of axis 0 of a token matrix "
            f"[M, ...]), got shape {x.shape}. Use {name}.reshape(M, 1) for one column."
        )


def check_grouped(fn, x, group_sizes, quantizer, flatten_axis, impl, key) -> int:
    check_token_matrix(fn, "x", x)
    if isinstance(quantizer, NVFP4Quantizer) and quantizer.use_rht:
        raise ValueError(
            f"{fn}: NVFP4Quantizer(use_rht=True) is not supported for grouped inputs: the "
            "16-point transform runs along the ragged rows, whose group sizes are only known on "
            "the device. Use use_rht=False."
        )
    fa = check_inputs(fn, x, quantizer, flatten_axis, (), impl, key)
    if fa == 0:
        raise ValueError(
            f"{fn}: flatten_axis resolves to 0 for x of shape {x.shape}: the groups are rows of "
            "the 2-D view (prod(S[:fa]), prod(S[fa:])), so flatten_axis must be >= 1 (-1 is usual)."
        )
    groups = check_group_sizes(fn, x, group_sizes)
    if isinstance(quantizer, DelayedScaleQuantizer):
        raise TypeError(
            f"{fn}: a DelayedScaleQuantizer holds one scale, but grouped inputs need one scale "
            f"and amax history per group. Use eqx_quant.GroupedDelayedScaleQuantizer("
            f"num_groups={groups}, ...)."
        )
    if isinstance(quantizer, GroupedDelayedScaleQuantizer) and quantizer.scale.ndim != 1:
        raise ValueError(
            f"{fn}: the GroupedDelayedScaleQuantizer holds a stack of states (scale of shape "
            f"{quantizer.scale.shape}), e.g. one per layer built with jax.vmap. Quantize inside "
            "jax.vmap or jax.lax.scan over the stack, or take one state with "
            "jax.tree.map(lambda a: a[i], quantizer)."
        )
    if isinstance(quantizer, GroupedDelayedScaleQuantizer) and quantizer.num_groups != groups:
        raise ValueError(
            f"{fn}: the GroupedDelayedScaleQuantizer has {quantizer.num_groups} groups but "
            f"group_sizes has {groups} entries. Build it with num_groups={groups}."
        )
    if not isinstance(
        quantizer,
        CurrentScaleQuantizer | GroupedDelayedScaleQuantizer | BlockScaleQuantizer | NVFP4Quantizer
        | Float8BlockQuantizer,
    ):
        raise TypeError(f"{fn}: unsupported quantizer {type(quantizer).__name__}.")
    return fa


