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
  `reference/tree.py`) over `S[:fa]`, cast with NaN canonical (`reference.cast_canonical`).

The kernel (inner primitive, `eqx_quant_fp8_quantize`) returns a sixth output: its dbias is
the node sums of `_dbias.py` (float32 `B + S[:keep] + (split,) + S[fa:]`) and `dbias_cast`
(with the `dbias_cast` param, else (0,)) node 0 in x's dtype; `_local` returns that cast as is
when no reduced axis is sharded, else `_dbias.finish` completes the tree across the shards.
"""

import dataclasses

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.core import ShapedArray
from jax.sharding import PartitionSpec

from .. import reference
from . import _dbias, _sharding
from ._primitive import Op, OpSpec, map_examples


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
    return _avals(params, x) + (_dbias.result_aval(params, x),)


def _inner_abstract_eval(params, x, scale):
    del scale
    return _avals(params, x) + _dbias.kernel_avals(params, x)


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
    avals = _inner_abstract_eval(params, x, scale)
    if nb == 0:
        outs = tuple(o.reshape(a.shape) for o, a in zip(one(x, scale), avals))
    else:
        # The barrier: a scale broadcast over the batch (a quantizer closed over by vmap)
        # sent XLA's algebraic simplifier into a circular loop on the exact multiply (an
        # error line in the log at every compile; the result was right).
        outs = map_examples(one, nb, (x, lax.optimization_barrier(scale)), avals)
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
    if params.with_dbias:
        dbias_plan = _dbias.plan(x.shape, nb, fa, example_spec)
    else:
        dbias_plan = _dbias.DbiasPlan(keep=0, split=1, cast=False)
    inner = dataclasses.replace(
        params,
        dbias_keep=dbias_plan.keep,
        dbias_split=dbias_plan.split,
        dbias_cast=dbias_plan.cast,
    )
    amax_axes = tuple(a for e in example_spec for a in _sharding.axes_of(e))
    if params.scale_from_amax and amax_axes:
        # The scale needs the global amax before the cast: one more pass over the local x.
        scale = _global_current_scale(params, x, scale, amax_axes)
        inner = dataclasses.replace(inner, scale_from_amax=False)
    row, col, scale_inv, amax, dbias, dbias_cast = bind_inner(x, scale, params=inner)
    amax = _sharding.pmax_amax(amax, amax_axes)
    if params.with_dbias and not dbias_plan.cast:
        dbias_cast = _dbias.finish(dbias, x.dtype, nb, dbias_plan.keep, example_spec[:fa])
    # The result, or (0,) in x's dtype without dbias.
    return row, col, scale_inv, amax, dbias_cast


def _global_current_scale(params, x, fallback, amax_axes):
    """Per-example current scale from the amax over all shards (`B + (1,)`)."""
    nb = params.n_batch
    local = map_examples(lambda xe: (reference.amax(xe),), nb, (x,), (fallback,))[0]
    amax = _sharding.pmax_amax(local, amax_axes)
    return reference.compute_scale(amax, params.q_dtype, 0.0, fallback)


def _partition(params, mesh, arg_infos, result_infos):
    del result_infos
    x_info = arg_infos[0]
    nb, fa = params.n_batch, params.flatten_axis
    spec = _sharding.padded_spec(x_info.sharding, len(x_info.shape))
    spec = _sharding.keep_divisible(mesh, x_info.shape, spec)
    if params.with_dbias:
        spec = _dbias.power_of_two_reduced(spec, mesh, nb, fa)
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


def dbias_only_params(n_batch: int, flatten_axis: int, impl: str, **inner) -> Fp8QuantizeParams:
    """This op's dbias-only form (no FP8 output; `inner`: the inner primitive's dbias_*)."""
    return Fp8QuantizeParams(
        q_dtype="float8_e4m3fn",
        flatten_axis=flatten_axis,
        rowwise=False,
        colwise=False,
        with_dbias=True,
        impl=impl,
        n_batch=n_batch,
        **inner,
    )


def dbias_only_local(x, example_spec, n_batch: int, flatten_axis: int, impl: str):
    """The dbias alone (this op's dbias-only form) of one device's `x`, complete across the
    sharded reduced axes, in x's dtype: for an op whose own kernel takes only simple trees
    (`mxfp8_quantize`), inside its partition."""
    params = dbias_only_params(n_batch, flatten_axis, impl)
    scale = jnp.ones(x.shape[:n_batch] + (1,), jnp.float32)
    return _local(params, example_spec, fp8_quantize_op.bind_inner, x, scale)[4]
