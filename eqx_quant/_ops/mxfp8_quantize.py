"""The MXFP8 quantize op: 1x32 blocks with E8M0 scales, rowwise and/or colwise in one pass.

`eqx_quant_mxfp8_quantize(x) -> (row, row_scale, col, col_scale)` (docs/block_formats.md):
rowwise blocks along the last axis, colwise blocks along axis `fa - 1`, both in x's layout;
scales as E8M0 bytes (`uint8`). No per-tensor quantity, so a batch (vmap) is just more rows
and a shard needs no collective: the partition only keeps blocks whole on each device.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray
from jax.sharding import PartitionSpec

from ..reference import _blocks, _mx
from . import _sharding
from ._primitive import Op, OpSpec


BLOCK = _mx.MX_BLOCK


@dataclasses.dataclass(frozen=True)
class Mxfp8QuantizeParams:
    """Static parameters of one `mxfp8_quantize` call (hashable)."""

    q_dtype: str
    flatten_axis: int  # per example; >= 1 when colwise
    rowwise: bool
    colwise: bool
    impl: str
    n_batch: int = 0

    def block_axis(self) -> int:
        return self.n_batch + self.flatten_axis - 1 if self.colwise else -1

    def ffi_attrs(self) -> dict:
        return dict(
            block_axis=np.int64(self.block_axis()),
            rowwise=bool(self.rowwise),
            colwise=bool(self.colwise),
        )


def scale_shapes(shape: tuple[int, ...], flatten_axis: int, block: int):
    """(rowwise, colwise) unpadded scale shapes of one example of `shape` (colwise blocks
    along axis `flatten_axis - 1`; None when that axis does not exist)."""
    row = shape[:-1] + (-(-shape[-1] // block),)
    if flatten_axis < 1:
        return row, None
    k = flatten_axis - 1
    return row, shape[:k] + (-(-shape[k] // block),) + shape[k + 1 :]


def _abstract_eval(params, x):
    nb = params.n_batch
    batch, s = x.shape[:nb], x.shape[nb:]
    q = jnp.dtype(params.q_dtype)
    row_s, col_s = scale_shapes(s, params.flatten_axis, BLOCK)
    none8 = ShapedArray((0,), jnp.uint8)
    return (
        ShapedArray(x.shape, q) if params.rowwise else ShapedArray((0,), q),
        ShapedArray(batch + row_s, jnp.uint8) if params.rowwise else none8,
        ShapedArray(x.shape, q) if params.colwise else ShapedArray((0,), q),
        ShapedArray(batch + col_s, jnp.uint8) if params.colwise else none8,
    )


def _reference(params, x):
    def one(xe):
        return _blocks.mxfp8_quantize(
            xe, params.q_dtype, params.flatten_axis - 1, params.rowwise, params.colwise
        )

    nb = params.n_batch
    if nb == 0:
        return one(x)
    outs = jax.vmap(one)(x.reshape((-1,) + x.shape[nb:]))
    return tuple(o.reshape(a.shape) for o, a in zip(outs, _abstract_eval(params, x)))


def _batch(params, args, dims):
    (x,), (d,) = args, dims
    new = dataclasses.replace(params, n_batch=params.n_batch + 1)
    out_dims = (
        0 if params.rowwise else None,
        0 if params.rowwise else None,
        0 if params.colwise else None,
        0 if params.colwise else None,
    )
    return new, (jnp.moveaxis(x, d, 0),), out_dims


def _blocked_dims(params) -> dict[int, int]:
    """{per-example dim: block size} of the dims whose shards must hold whole blocks."""
    dims = {}
    if params.colwise:
        dims[params.flatten_axis - 1] = BLOCK
    if params.rowwise:
        dims[-1] = BLOCK
    return dims


def _sharding_rule(params, mesh, value_types, result_types):
    del result_types
    nb, fa = params.n_batch, params.flatten_axis
    shape = tuple(value_types[0].shape)[nb:]
    rule = _sharding.BlockRule(nb, shape, _blocked_dims(params), mesh)
    b = rule.batch
    x = b + rule.x
    results = [
        x if params.rowwise else rule.dummy(),
        b + rule.scale_dims(len(shape) - 1) if params.rowwise else rule.dummy(),
        x if params.colwise else rule.dummy(),
        b + rule.scale_dims(fa - 1) if params.colwise else rule.dummy(),
    ]
    return rule.render([x], results)


def _partition(params, mesh, arg_infos, result_infos):
    del result_infos
    x_info = arg_infos[0]
    nb = params.n_batch
    rank = len(x_info.shape) - nb
    spec = _sharding.padded_spec(x_info.sharding, len(x_info.shape))
    spec = _sharding.keep_divisible(mesh, x_info.shape, spec)
    blocked = {nb + (d % rank): b for d, b in _blocked_dims(params).items()}
    spec = _sharding.keep_blocks_whole(mesh, x_info.shape, spec, blocked)
    p = PartitionSpec(*spec)
    none = PartitionSpec(None)

    def local_fn(bind_inner, x):
        return bind_inner(x, params=params)

    result_specs = (
        p if params.rowwise else none,
        p if params.rowwise else none,
        p if params.colwise else none,
        p if params.colwise else none,
    )
    return local_fn, result_specs, (p,)


def _unsharded(params, bind_inner, x):
    return bind_inner(x, params=params)


mxfp8_quantize_op = Op(
    OpSpec(
        name="mxfp8_quantize",
        abstract_eval=_abstract_eval,
        inner_abstract_eval=_abstract_eval,
        reference=_reference,
        batch=_batch,
        sharding_rule=_sharding_rule,
        partition=_partition,
        unsharded=_unsharded,
    )
)
