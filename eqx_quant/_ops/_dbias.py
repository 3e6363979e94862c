"""The fused bias gradient's plan and finish, shared by the ops that return it (`fp8_quantize`,
`mxfp8_quantize`).

A kernel returns the dbias of its local x as float32 node sums: `B + S[:keep] + (split,) +
S[fa:]`, the leading `keep` reduced axes unreduced (they are sharded) and axis `keep` as the
`split` node sums of its tree (so a GPU can spread the reduction over many blocks), node 0
overwritten by the kernel's own finishing tree over all nodes (the axis' whole local tree).
With `cast` it also returns node 0 in x's dtype (`B + S[:keep] + S[fa:]`). When no reduced
axis is sharded that cast is the op's dbias; otherwise `finish` completes the tree over the
sharded axes, gathering their partial sums (bit-identical under any power-of-two sharding),
and casts.
"""

import dataclasses

import jax.numpy as jnp
from jax import lax
from jax.core import ShapedArray

from .. import reference
from . import _sharding

# Node sums per dbias tree that a kernel returns (a power of two; 64 spreads an 8192-row
# reduction over 64 x (columns / block) GPU blocks). The kernels accept at most this many
# (kMaxDbiasSplit, csrc/common/fp8_quantize_problem.h).
DBIAS_SPLIT = 64


@dataclasses.dataclass(frozen=True)
class DbiasPlan:
    """What the kernel computes of the local dbias: `keep`, `split`, and whether its cast
    node 0 is the whole dbias (`cast`: no reduced axis sharded)."""

    keep: int
    split: int
    cast: bool


def result_aval(params, x) -> ShapedArray:
    """The op's dbias: `B + S[fa:]` in x's dtype, or (0,) without dbias (`params`: an op's
    params with `n_batch`, `flatten_axis`, `with_dbias`)."""
    nb, fa = params.n_batch, params.flatten_axis
    return ShapedArray(x.shape[:nb] + x.shape[nb + fa :] if params.with_dbias else (0,), x.dtype)


def kernel_avals(params, x) -> tuple[ShapedArray, ShapedArray]:
    """The kernel's (node sums, cast node 0) for the inner primitive's params (also
    `dbias_keep`, `dbias_split`, `dbias_cast`)."""
    nb, fa, keep = params.n_batch, params.flatten_axis, params.dbias_keep
    batch, s = x.shape[:nb], x.shape[nb:]
    nodes = batch + s[:keep] + (params.dbias_split,) + s[fa:] if params.with_dbias else (0,)
    cast = batch + s[:keep] + s[fa:] if params.dbias_cast else (0,)
    return ShapedArray(nodes, jnp.float32), ShapedArray(cast, x.dtype)


def plan(x_shape, n_batch: int, flatten_axis: int, example_spec) -> DbiasPlan:
    """The plan for the local `x_shape` (`example_spec`: each per-example dim's mesh axes or
    None)."""
    fa = flatten_axis
    sharded_reduced = [i for i in range(fa) if example_spec[i] is not None]
    keep = max(sharded_reduced) if sharded_reduced else 0
    split = 1
    if keep < fa:
        # The largest power of two (<= DBIAS_SPLIT) that divides the axis: its tree's nodes
        # at that depth are then equal chunks (with a remainder they would not be).
        length = x_shape[n_batch + keep]
        split = min(DBIAS_SPLIT, length & -length) if length > 0 else 1
    return DbiasPlan(keep=keep, split=split, cast=not sharded_reduced)


def power_of_two_reduced(spec, mesh, n_batch: int, flatten_axis: int):
    """`spec` with the reduced dims whose shard count is not a power of two unsharded: the
    canonical tree splits an axis into halves, so only those shardings align."""
    return [
        None
        if n_batch <= d < n_batch + flatten_axis
        and e is not None
        and not _sharding.is_power_of_two(_sharding.shard_count(mesh, e))
        else e
        for d, e in enumerate(spec)
    ]


def finish(nodes, dtype, n_batch: int, keep: int, reduced_spec):
    """The op's dbias from the kernel's node sums when a reduced axis is sharded: axis `keep`
    (its local tree is node 0), then axes keep-1..0, each gathered across its shards first
    when sharded (only the small partial sums move); cast to `dtype`, NaN canonical."""
    partial = nodes
    for axis in range(keep, -1, -1):
        position = n_batch + axis
        # This device's part of the axis, then its other shards' parts.
        if axis == keep:
            partial = lax.index_in_dim(partial, 0, position, keepdims=False)
        else:
            partial = reference.tree_sum_by_slices(partial, position)
        names = _sharding.axes_of(reduced_spec[axis]) if axis < len(reduced_spec) else ()
        if names:
            gathered = lax.all_gather(partial, names, axis=position, tiled=False)
            partial = reference.tree_sum_by_slices(gathered, position)
    return reference.cast_canonical(partial, dtype)
