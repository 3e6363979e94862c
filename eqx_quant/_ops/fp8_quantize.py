"""The FP8 per-tensor quantize op: cast rowwise, cast + transpose colwise, amax, fused dbias.

One declaration serves the CPU kernel, the CUDA kernel and the pure-JAX reference. The public
(outer) primitive is `fp8_quantize(x, scale) -> (row, col, scale_inv, amax, dbias)` with

- `x`: `B + S` (B = `n_batch` vmapped dims), `scale`: `B + (1,)` float32 (with
  `scale_from_amax`, current scaling inside the op: each example's scale is
  `compute_scale(amax(x_b), q_dtype, 0, scale_b)`, so `scale` is only the fallback for an
  amax that is 0, NaN or Inf);
- `row`: `B + S` fp8 or (0,); `col`: `B + S[fa:] + S[:fa]` fp8 or (0,) (both may be absent
  with `with_dbias`: dbias alone, the block formats' `quantize_dbias`);
- `scale_inv`, `amax`: `B + (1,)` float32 (amax = max |x| ignoring NaN, per example);
- `dbias`: `B + S[fa:]` in x's dtype, or (0,): the float32 canonical tree sum (see
  `reference/_tree.py`) over `S[:fa]`, cast with NaN canonical (`reference.cast_canonical`).

The kernel (inner primitive, `eqx_quant_fp8_quantize`) returns a sixth output, and its dbias
is partial: `dbias` is float32 `B + S[:keep] + (split,) + S[fa:]`, the leading `keep` reduced
axes unreduced (they are sharded) and axis `keep` as the `split` node sums of its tree (so a
GPU can spread the reduction over many blocks), with node 0 overwritten by the kernel's own
finishing tree over all nodes (the axis' whole local tree; the other nodes keep their sums);
`dbias_cast` (with the `dbias_cast` param, else (0,)) is node 0 in x's dtype,
`B + S[:keep] + S[fa:]`. When the local tree is the whole tree (no reduced axis sharded) the
op returns `dbias_cast` as is, so no XLA kernel has to slice and cast; otherwise
`_finish_dbias` takes node 0 and completes the tree over the sharded axes, gathering their
partial sums (bit-identical under any power-of-two sharding), and casts.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.core import ShapedArray
from jax.sharding import PartitionSpec

from .. import reference
from . import _sharding
from ._primitive import Op, OpSpec


# Node sums per dbias tree that a kernel returns (a power of two; 64 spreads an 8192-row
# reduction over 64 x (columns / block) GPU blocks). The kernels accept at most this many
# (kMaxDbiasSplit, csrc/common/fp8_quantize_problem.h).
DBIAS_SPLIT = 64


@dataclasses.dataclass(frozen=True)
class Fp8QuantizeParams:
    """Static parameters of one `fp8_quantize` call (hashable)."""

    q_dtype: str
    flatten_axis: int  # in the per-example shape, 0 <= fa <= rank
    rowwise: bool
    colwise: bool
    with_dbias: bool
    impl: str
    scale_from_amax: bool = False
    n_batch: int = 0
    dbias_keep: int = 0  # inner primitive only
    dbias_split: int = 1  # inner primitive only
    dbias_cast: bool = False  # inner primitive only

    def ffi_attrs(self) -> dict:
        return dict(
            n_batch=np.int64(self.n_batch),
            flatten_axis=np.int64(self.flatten_axis),
            dbias_keep=np.int64(self.dbias_keep),
            dbias_split=np.int64(self.dbias_split),
            rowwise=bool(self.rowwise),
            colwise=bool(self.colwise),
            with_dbias=bool(self.with_dbias),
            dbias_cast=bool(self.dbias_cast),
            scale_from_amax=bool(self.scale_from_amax),
        )


def _avals(params, x):
    """The four results that the public and the inner primitive share."""
    nb, fa = params.n_batch, params.flatten_axis
    batch, s = x.shape[:nb], x.shape[nb:]
    q = jnp.dtype(params.q_dtype)
    return (
        ShapedArray(x.shape if params.rowwise else (0,), q),
        ShapedArray(batch + s[fa:] + s[:fa] if params.colwise else (0,), q),
        ShapedArray(batch + (1,), jnp.float32),
        ShapedArray(batch + (1,), jnp.float32),
    )


def _abstract_eval(params, x, scale):
    del scale
    nb, fa = params.n_batch, params.flatten_axis
    dbias = x.shape[:nb] + x.shape[nb + fa :] if params.with_dbias else (0,)
    return _avals(params, x) + (ShapedArray(dbias, x.dtype),)


def _inner_abstract_eval(params, x, scale):
    del scale
    nb, fa, keep = params.n_batch, params.flatten_axis, params.dbias_keep
    batch, s = x.shape[:nb], x.shape[nb:]
    nodes = batch + s[:keep] + (params.dbias_split,) + s[fa:] if params.with_dbias else (0,)
    cast = batch + s[:keep] + s[fa:] if params.dbias_cast else (0,)
    return _avals(params, x) + (
        ShapedArray(nodes, jnp.float32),
        ShapedArray(cast, x.dtype),
    )


def _reference(params, x, scale):
    def one(xe, se):
        return reference.fp8_quantize(
            xe,
            se,
            q_dtype=params.q_dtype,
            flatten_axis=params.flatten_axis,
            rowwise=params.rowwise,
            colwise=params.colwise,
            with_dbias=params.with_dbias,
            scale_from_amax=params.scale_from_amax,
            dbias_keep=params.dbias_keep,
            dbias_split=params.dbias_split,
        )

    nb = params.n_batch
    if nb == 0:
        outs = one(x, scale)
    else:
        flat_x = x.reshape((-1,) + x.shape[nb:])
        outs = jax.vmap(one)(flat_x, scale.reshape((-1, 1)))
    avals = _inner_abstract_eval(params, x, scale)
    outs = tuple(o.reshape(a.shape) for o, a in zip(outs, avals))
    if params.dbias_cast:
        node0 = lax.index_in_dim(outs[4], 0, nb + params.dbias_keep, keepdims=False)
        cast = reference.cast_canonical(node0, x.dtype)
    else:
        cast = jnp.zeros((0,), x.dtype)
    return outs + (cast,)


def _batch(params, args, dims):
    x, scale = args
    x_dim, scale_dim = dims
    size = x.shape[x_dim] if x_dim is not None else scale.shape[scale_dim]
    x = jnp.moveaxis(x, x_dim, 0) if x_dim is not None else jnp.broadcast_to(x, (size,) + x.shape)
    if scale_dim is None:
        scale = jnp.broadcast_to(scale, (size,) + scale.shape)
    else:
        scale = jnp.moveaxis(scale, scale_dim, 0)
    new = dataclasses.replace(params, n_batch=params.n_batch + 1)
    out_dims = (
        0 if params.rowwise else None,
        0 if params.colwise else None,
        0,
        0,
        0 if params.with_dbias else None,
    )
    return new, (x, scale), out_dims


def _sharding_rule(params, mesh, value_types, result_types):
    del mesh, result_types
    nb, fa = params.n_batch, params.flatten_axis
    rank = len(value_types[0].shape) - nb
    b = _sharding.factors("b", nb)
    s = _sharding.factors("s", rank)
    x = " ".join(b + s)
    row = x if params.rowwise else "z0"
    col = " ".join(b + s[fa:] + s[:fa]) if params.colwise else "z1"
    dbias = " ".join(b + s[fa:]) if params.with_dbias else "z2"
    scale_in = " ".join(b + ["u0"])
    scale_inv = " ".join(b + ["u1"])
    amax = " ".join(b + ["u2"])
    return f"{x}, {scale_in} -> {row}, {col}, {scale_inv}, {amax}, {dbias}"


def _local(params, example_spec, bind_inner, x, scale):
    """The op on one device's shards: the kernel, then the collectives that make the amax and
    dbias global (`example_spec` = the mesh axes of each per-example dim, None if unsharded)."""
    nb, fa = params.n_batch, params.flatten_axis
    sharded_reduced = [i for i in range(fa) if example_spec[i] is not None]
    keep = max(sharded_reduced) if (params.with_dbias and sharded_reduced) else 0
    split = 1
    if params.with_dbias and keep < fa:
        # The largest power of two (<= DBIAS_SPLIT) that divides the axis: its tree's nodes
        # at that depth are then equal chunks (with a remainder they would not be).
        length = x.shape[nb + keep]
        split = min(DBIAS_SPLIT, length & -length) if length > 0 else 1
    # The kernel's node 0 is the whole dbias when no reduced axis is sharded.
    cast_in_kernel = params.with_dbias and not sharded_reduced
    inner = dataclasses.replace(
        params, dbias_keep=keep, dbias_split=split, dbias_cast=cast_in_kernel
    )
    amax_axes = tuple(a for e in example_spec for a in _sharding.axes_of(e))
    if params.scale_from_amax and amax_axes:
        # The scale needs the global amax before the cast: one more pass over the local x.
        scale = _global_current_scale(params, x, scale, amax_axes)
        inner = dataclasses.replace(inner, scale_from_amax=False)
    row, col, scale_inv, amax, dbias, dbias_cast = bind_inner(x, scale, params=inner)
    if amax_axes:
        amax = lax.pmax(amax, amax_axes)
    if params.with_dbias and not cast_in_kernel:
        dbias_cast = _finish_dbias(dbias, nb, keep, example_spec[:fa])
        dbias_cast = reference.cast_canonical(dbias_cast, x.dtype)
    # The result, or (0,) in x's dtype without dbias.
    return row, col, scale_inv, amax, dbias_cast


def _global_current_scale(params, x, fallback, amax_axes):
    """Per-example current scale from the amax over all shards (`B + (1,)`)."""
    nb = params.n_batch
    local = jax.vmap(reference.amax)(x.reshape((-1,) + x.shape[nb:])).reshape(fallback.shape)
    return reference.compute_scale(lax.pmax(local, amax_axes), params.q_dtype, 0.0, fallback)


def _finish_dbias(partial, n_batch, keep, reduced_spec):
    """Complete the canonical tree: axis `keep` (its local tree is node 0 of the kernel's split
    nodes), then axes keep-1..0, each gathered across its shards first when sharded (only the
    small partial sums move)."""
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
    return partial


def _partition(params, mesh, arg_infos, result_infos):
    del result_infos
    x_info = arg_infos[0]
    nb, fa = params.n_batch, params.flatten_axis
    spec = _sharding.padded_spec(x_info.sharding, len(x_info.shape))
    spec = _sharding.keep_divisible(mesh, x_info.shape, spec)
    if params.with_dbias:
        # The canonical tree splits an axis into halves; only power-of-two shard counts align.
        spec = [
            None
            if nb <= d < nb + fa
            and e is not None
            and not _sharding.is_power_of_two(_sharding.shard_count(mesh, e))
            else e
            for d, e in enumerate(spec)
        ]
    batch, example = spec[:nb], spec[nb:]

    def local_fn(bind_inner, x, scale):
        return _local(params, example, bind_inner, x, scale)

    none = PartitionSpec(None)
    result_specs = (
        PartitionSpec(*spec) if params.rowwise else none,
        PartitionSpec(*batch, *example[fa:], *example[:fa]) if params.colwise else none,
        PartitionSpec(*batch, None),
        PartitionSpec(*batch, None),
        PartitionSpec(*batch, *example[fa:]) if params.with_dbias else none,
    )
    arg_specs = (PartitionSpec(*spec), PartitionSpec(*batch, None))
    return local_fn, result_specs, arg_specs


def _unsharded(params, bind_inner, x, scale):
    rank = x.ndim - params.n_batch
    return _local(params, [None] * rank, bind_inner, x, scale)


fp8_quantize_op = Op(
    OpSpec(
        name="fp8_quantize",
        abstract_eval=_abstract_eval,
        inner_abstract_eval=_inner_abstract_eval,
        reference=_reference,
        batch=_batch,
        sharding_rule=_sharding_rule,
        partition=_partition,
        unsharded=_unsharded,
    )
)
