"""Pure-JAX reference of per-tensor FP8 quantization (delayed and current scaling).

Bit-exact with TE's CUDA kernels and with eqx_quant's CPU/CUDA kernels on every backend:
every float operation is done on the bit patterns (`ieee`): the exactly rounded scale
division, the one float32 multiply of the cast, the saturating round-to-nearest-even FP8
conversion (NaN -> byte 0x7F), the NaN-ignoring amax (maxNum, like the kernels' `fmaxf`) and
the dbias tree additions, subnormals included (XLA:CPU would flush them).
"""

import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float, Shaped

from .ieee import (
    cast_canonical,
    divide,
    divide_by_constant,
    is_positive_finite,
    max_abs,
    multiply,
    to_fp8_bytes,
)

FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


def amax(x: Shaped[Array, "..."]) -> Float[Array, "1"]:
    """`max |x|` as float32 of shape (1,), ignoring NaN; 0 for an empty or all-NaN x."""
    return max_abs(x).reshape(1)


def compute_scale(
    amax: Float[Array, "*batch 1"],
    q_dtype: str,
    margin: float,
    prev_scale: Float[Array, "*batch 1"],
) -> Float[Array, "*batch 1"]:
    """TE's `compute_scale_from_amax`: `(fp8_max / amax) / 2^margin` in IEEE float32.

    Falls back to `prev_scale` where `amax <= 0` or `amax` is not finite. No epsilon and no
    clamp: a tiny amax gives an infinite scale, as in TE.
    """
    fp8_max = jnp.full_like(amax, FP8_MAX[q_dtype], dtype=jnp.float32)
    scale = divide(fp8_max, amax)
    if margin != 0.0:
        power = np.float32(2.0) ** np.float32(margin)
        scale = divide_by_constant(scale, float(power))
    ok = is_positive_finite(amax)
    return jnp.where(ok, scale, prev_scale.astype(jnp.float32))


def reciprocal(scale: Float[Array, "*batch 1"]) -> Float[Array, "*batch 1"]:
    """IEEE float32 `1 / scale`, as TE's kernels write `scale_inv`."""
    return divide(jnp.ones_like(scale, dtype=jnp.float32), scale)


def cast_fp8(y: Float[Array, "..."], q_dtype: str) -> Shaped[Array, "..."]:
    """Saturating round-to-nearest-even cast of float32 values; NaN becomes the byte 0x7F."""
    return lax.bitcast_convert_type(to_fp8_bytes(y, q_dtype), jnp.dtype(q_dtype))


def transpose_2d(a: Shaped[Array, "..."], flatten_axis: int) -> Shaped[Array, "..."]:
    """The "T" layout: axes rotated by `flatten_axis`, i.e. `S[fa:] + S[:fa]`."""
    order = tuple(range(flatten_axis, a.ndim)) + tuple(range(flatten_axis))
    return jnp.transpose(a, order)


def untranspose_2d(a: Shaped[Array, "..."], flatten_axis: int) -> Shaped[Array, "..."]:
    """Inverse of `transpose_2d` for data whose original flatten_axis was `flatten_axis`."""
    split = a.ndim - flatten_axis
    order = tuple(range(split, a.ndim)) + tuple(range(split))
    return jnp.transpose(a, order)


def dequantize_tensor(
    data: Shaped[Array, "..."], scale_inv: Float[Array, "1"], dq_dtype
) -> Shaped[Array, "..."]:
    """`float32(data) * scale_inv`, cast to `dq_dtype`."""
    return cast_canonical(multiply(data.astype(jnp.float32), scale_inv.reshape(())), dq_dtype)


def fp8_quantize(
    x: Shaped[Array, "..."],
    scale: Float[Array, "1"],
    *,
    q_dtype: str,
    flatten_axis: int,
    rowwise: bool,
    colwise: bool,
    with_dbias: bool,
    scale_from_amax: bool = False,
    dbias_keep: int = 0,
    dbias_split: int = 1,
) -> tuple[Array, Array, Array, Array, Array]:
    """Reference of the `eqx_quant_fp8_quantize` kernel for one example.

    Returns `(row, col, scale_inv, amax, dbias)` exactly as the kernel writes them: absent
    outputs have shape (0,); `dbias` holds float32 canonical tree sums over axes
    `dbias_keep..flatten_axis-1` (see `tree.py`), with axis `dbias_keep` split into the
    `dbias_split` nodes of its tree: shape `S[:keep] + (split,) + S[fa:]` (split is 1 when
    nothing is reduced), node 0 then replaced by the tree over all nodes (the axis' whole
    tree, finished by the kernel; the other nodes keep their sums). Not yet cast to x's dtype.
    With `scale_from_amax` the scale used is `compute_scale(amax(x), q_dtype, 0, scale)`
    (current scaling; `scale` is the fallback).
    """
    from .tree import nested_tree_sum, split_tree_sum, tree_sum

    empty = jnp.zeros((0,), q_dtype)
    if scale_from_amax:
        scale = compute_scale(amax(x), q_dtype, 0.0, scale)
    y = multiply(x.astype(jnp.float32), scale.reshape(()))
    q = cast_fp8(y, q_dtype)
    row = q if rowwise else empty
    col = transpose_2d(q, flatten_axis) if colwise else empty
    if not with_dbias:
        dbias = jnp.zeros((0,), jnp.float32)
    elif dbias_keep == flatten_axis:
        dbias = jnp.expand_dims(x.astype(jnp.float32), dbias_keep)
    else:
        inner = nested_tree_sum(x.astype(jnp.float32), dbias_keep + 1, flatten_axis)
        dbias = split_tree_sum(inner, dbias_keep, dbias_split)
        if dbias_split > 1:
            # Node 0 := the tree over all nodes, i.e. the whole axis' tree (the nodes of a
            # power-of-two split are its depth-log2(split) subtrees).
            first = (slice(None),) * dbias_keep + (0,)
            dbias = dbias.at[first].set(tree_sum(dbias, dbias_keep))
    return row, col, reciprocal(scale), amax(x), dbias
