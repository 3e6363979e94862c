"""The FP8 per-tensor quantize op: cast rowwise, cast + transpose colwise, amax, fused dbias.

One declaration serves the CPU kernel, the CUDA kernel and the pure-JAX reference:
`eqx_quant_fp8_quantize(x, scale) -> (row, col, scale_inv, amax, dbias)` with

- `x`: `B + S` (B = `n_batch` vmapped dims), `scale`: `B + (1,)` float32;
- `row`: `B + S` fp8 or (0,); `col`: `B + S[fa:] + S[:fa]` fp8 or (0,);
- `scale_inv`, `amax`: `B + (1,)` float32 (amax = max |x| ignoring NaN, per example);
- `dbias`: `B + S[:keep] + S[fa:]` float32 canonical tree sums (see `reference/_tree.py`), or (0,).
"""

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax
from jax.core import ShapedArray
from jax.sharding import PartitionSpec

from .. import reference
from . import _sharding
from ._primitive import Op, OpSpec


@dataclasses.dataclass(frozen=True)
class Fp8QuantizeParams:
    """Static parameters of one `fp8_quantize` call (hashable)."""

    q_dtype: str
    flatten_axis: int  # in the per-example shape, 0 <= fa <= rank
    rowwise: bool
    colwise: bool
    with_dbias: bool
    impl: str
    n_batch: int = 0
    dbias_keep: int = 0

    def ffi_attrs(self) -> dict:
        return dict(
            n_batch=jnp.int64(self.n_batch) if False else _i64(self.n_batch),
            flatten_axis=_i64(self.flatten_axis),
            dbias_keep=_i64(self.dbias_keep),
            rowwise=bool(self.rowwise),
            colwise=bool(self.colwise),
            with_dbias=bool(self.with_dbias),
        )


def _i64(v: int):
    import numpy as np

    return np.int64(v)


def _shapes(params: Fp8QuantizeParams, x_shape: tuple[int, ...]) -> dict:
    nb, fa = params.n_batch, params.flatten_axis
    batch, s = x_shape[:nb], x_shape[nb:]
    return dict(
        row=x_shape if params.rowwise else (0,),
        col=batch + s[fa:] + s[:fa] if params.colwise else (0,),
        scale=batch + (1,),
        dbias=batch + s[: params.dbias_keep] + s[fa:] if params.with_dbias else (0,),
    )


def _abstract_eval(params, x, scale):
    shp = _shapes(params, x.shape)
    q = jnp.dtype(params.q_dtype)
    return (
        ShapedArray(shp["row"], q),
        ShapedArray(shp["col"], q),
        ShapedArray(shp["scale"], jnp.float32),
        ShapedArray(shp["scale"], jnp.float32),
        ShapedArray(shp["dbias"], jnp.float32),
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
            dbias_keep=params.dbias_keep,
        )

    nb = params.n_batch
    if nb == 0:
        return one(x, scale)
    batch = x.shape[:nb]
    flat_x = x.reshape((-1,) + x.shape[nb:])
    flat_s = scale.reshape((-1, 1))
    outs = jax.vmap(one)(flat_x, flat_s)
    shp = _shapes(params, x.shape)
    keys = ("row", "col", "scale", "scale", "dbias")
    present = (params.rowwise, params.colwise, True, True, params.with_dbias)
    return tuple(
        o.reshape(shp[k]) if p else o.reshape((0,)) for o, k, p in zip(outs, keys, present)
    ) if batch else outs


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
    nb, fa = params.n_batch, params.flatten_axis
    rank = len(value_types[0].shape) - nb
    b = _sharding.factors("b", nb)
    s = _sharding.factors("s", rank)
    x = " ".join(b + s)
    row = x if params.rowwise else "z0"
    col = " ".join(b + s[fa:] + s[:fa]) if params.colwise else "z1"
    dbias = " ".join(b + s[: params.dbias_keep] + s[fa:]) if params.with_dbias else "z2"
    scale_in = " ".join(b + ["u0"])
    scale_inv = " ".join(b + ["u1"])
    amax = " ".join(b + ["u2"])
    return f"{x}, {scale_in} -> {row}, {col}, {scale_inv}, {amax}, {dbias}"


def _partition(params, mesh, arg_infos, result_infos):
    x_info = arg_infos[0]
    nb, fa = params.n_batch, params.flatten_axis
    shape = x_info.shape
    spec = _sharding.padded_spec(x_info.sharding, len(shape))
    spec = _sharding.keep_divisible(mesh, shape, spec)
    if params.with_dbias:
        # The canonical tree splits an axis into halves; only power-of-two shard counts align.
        spec = [
            None
            if nb <= d < nb + fa and e is not None
            and not _sharding.is_power_of_two(_sharding.shard_count(mesh, e))
            else e
            for d, e in enumerate(spec)
        ]
    batch, example = spec[:nb], spec[nb:]
    amax_axes = tuple(a for e in example for a in _sharding.axes_of(e))
    reduced_sharded = [i for i in range(fa) if example[i] is not None] if params.with_dbias else []
    keep = max(reduced_sharded) if reduced_sharded else 0
    local_params = dataclasses.replace(params, dbias_keep=keep)

    def local_fn(bind_inner, x, scale):
        row, col, scale_inv, amax, dbias = bind_inner(x, scale, params=local_params)
        if amax_axes:
            amax = lax.pmax(amax, amax_axes)
        if reduced_sharded:
            dbias = _combine_dbias(dbias, nb, keep, example, mesh)
        return row, col, scale_inv, amax, dbias

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


def _combine_dbias(partial, n_batch, keep, example_spec, mesh):
    """Finish the canonical tree over reduced axes keep..0 across shards.

    The kernel already reduced axes keep+1.. fully and the local part of axis `keep`. Each
    sharded axis is finished by gathering the per-shard partial sums (small: no data is
    gathered) and summing them with the top levels of the same tree.
    """
    for axis in range(keep, -1, -1):
        position = n_batch + axis
        if axis < keep:
            partial = reference.tree_sum(partial, position)
            partial = jnp.expand_dims(partial, position) if example_spec[axis] else partial
            if example_spec[axis] is None:
                continue
            partial = jnp.squeeze(partial, position)
        names = _sharding.axes_of(example_spec[axis])
        gathered = lax.all_gather(partial, names, axis=position, tiled=False)
        partial = reference.tree_sum(gathered, position)
    return partial


fp8_quantize_op = Op(
    OpSpec(
        name="fp8_quantize",
        abstract_eval=_abstract_eval,
        reference=_reference,
        ffi_attrs=lambda params: params.ffi_attrs(),
        batch=_batch,
        sharding_rule=_sharding_rule,
        partition=_partition,
    )
)
