"""The NVFP4 ops (docs/block_formats.md): the global amaxes, then the quantization.

- `eqx_quant_nvfp4_amax(x) -> (amax, rht_amax)`: per-example NaN-ignoring `max |x|` and, with
  the RHT, `max |RHT_K(x)|`. Under sharding each device reduces its shard and a `pmax` makes
  the result global, so a sharded call uses the unsharded call's amax bit for bit.
- `eqx_quant_nvfp4_quantize(x, amax, col_amax, key, offset) -> (row, row_scale, col,
  col_scale)`: `float4_e2m1fn` data (packed two per byte by the kernels: flat element 2i in
  the low nibble of byte i, 2i+1 in the high nibble) and `float8_e4m3fn` block scales, the
  `ScaledTensor` dtypes, so no conversion pass follows. `offset` is the global position of
  the local block (zeros unsharded; the partition adds each shard's position) and the inner
  primitive carries the unsharded shape, so the stochastic-rounding bits of every element
  depend only on its global index. `key` (`B + (2,)`) and `offset` (`(n,)`) are read only with
  stochastic rounding; without it they may be empty (`B + (0,)`, `(0,)`).
"""

import dataclasses

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.core import ShapedArray
from jax.sharding import PartitionSpec

from ..reference import blocks_nd, nvfp4
from . import _sharding
from ._primitive import Op, OpSpec, batch_size, map_examples

BLOCK = nvfp4.NVFP4_BLOCK


def _move_or_broadcast(a, dim, size):
    if dim is None:
        return jnp.broadcast_to(a, (size,) + a.shape)
    return jnp.moveaxis(a, dim, 0)


def _example_axes(spec, n_batch) -> tuple[str, ...]:
    return tuple(a for e in spec[n_batch:] for a in _sharding.axes_of(e))


# --------------------------------------------------------------------------------------------
# amax


@dataclasses.dataclass(frozen=True)
class Nvfp4AmaxParams:
    flatten_axis: int
    with_rht: bool
    rht_sign_mask: int
    impl: str
    n_batch: int = 0

    def block_axis(self) -> int:
        return self.n_batch + self.flatten_axis - 1 if self.with_rht else -1

    def ffi_attrs(self) -> dict:
        return dict(
            n_batch=np.int64(self.n_batch),
            block_axis=np.int64(self.block_axis()),
            with_rht=bool(self.with_rht),
            rht_sign_mask=np.int64(self.rht_sign_mask),
        )


def _amax_abstract_eval(params, x):
    batch = x.shape[: params.n_batch]
    return (
        ShapedArray(batch + (1,), jnp.float32),
        ShapedArray(batch + (1,) if params.with_rht else (0,), jnp.float32),
    )


def _amax_reference(params, x):
    def one(xe):
        return blocks_nd.nvfp4_amax(
            xe, params.flatten_axis - 1, params.with_rht, params.rht_sign_mask
        )

    nb = params.n_batch
    if nb == 0:
        return one(x)
    return map_examples(one, nb, (x,), _amax_abstract_eval(params, x))


def _amax_batch(params, args, dims):
    (x,), (d,) = args, dims
    new = dataclasses.replace(params, n_batch=params.n_batch + 1)
    return new, (jnp.moveaxis(x, d, 0),), (0, 0 if params.with_rht else None)


def _amax_blocked(params) -> dict[int, int]:
    return {params.flatten_axis - 1: BLOCK} if params.with_rht else {}


def _amax_sharding_rule(params, mesh, value_types, result_types):
    del result_types
    nb = params.n_batch
    shape = tuple(value_types[0].shape)[nb:]
    rule = _sharding.BlockRule(nb, shape, _amax_blocked(params), mesh)
    b = rule.batch
    rht = b + rule.unrelated(1) if params.with_rht else rule.dummy()
    return rule.render([b + rule.x], [b + rule.unrelated(1), rht])


def _amax_spec(params, mesh, shape, sharding) -> list:
    nb = params.n_batch
    spec = _sharding.padded_spec(sharding, len(shape))
    spec = _sharding.keep_divisible(mesh, shape, spec)
    blocked = {nb + d: b for d, b in _amax_blocked(params).items()}
    return _sharding.keep_blocks_whole(mesh, shape, spec, blocked)


def _amax_partition(params, mesh, arg_infos, result_infos):
    del result_infos
    x_info = arg_infos[0]
    spec = _amax_spec(params, mesh, x_info.shape, x_info.sharding)
    nb = params.n_batch
    axes = _example_axes(spec, nb)

    def local_fn(bind_inner, x):
        amax, rht_amax = bind_inner(x, params=params)
        amax = _sharding.pmax_amax(amax, axes)
        if params.with_rht:
            rht_amax = _sharding.pmax_amax(rht_amax, axes)
        return amax, rht_amax

    out = PartitionSpec(*spec[:nb], None)
    rht = out if params.with_rht else PartitionSpec(None)
    return local_fn, (out, rht), (PartitionSpec(*spec),)


nvfp4_amax_op = Op(
    OpSpec(
        name="nvfp4_amax",
        abstract_eval=_amax_abstract_eval,
        inner_abstract_eval=_amax_abstract_eval,
        reference=_amax_reference,
        batch=_amax_batch,
        sharding_rule=_amax_sharding_rule,
        partition=_amax_partition,
        unsharded=lambda params, bind_inner, x: bind_inner(x, params=params),
    )
)


# --------------------------------------------------------------------------------------------
# quantize


@dataclasses.dataclass(frozen=True)
class Nvfp4QuantizeParams:
    flatten_axis: int
    rowwise: bool
    colwise: bool
    use_2d: bool
    use_rht: bool
    rht_sign_mask: int
    stochastic_rounding: bool
    impl: str
    n_batch: int = 0
    global_shape: tuple[int, ...] | None = None  # inner primitive only: the unsharded S

    def block_axis(self) -> int:
        if self.colwise or self.use_2d:
            return self.n_batch + self.flatten_axis - 1
        return -1

    def ffi_attrs(self) -> dict:
        return dict(
            n_batch=np.int64(self.n_batch),
            block_axis=np.int64(self.block_axis()),
            rowwise=bool(self.rowwise),
            colwise=bool(self.colwise),
            use_2d=bool(self.use_2d),
            use_rht=bool(self.use_rht),
            rht_sign_mask=np.int64(self.rht_sign_mask),
            stochastic_rounding=bool(self.stochastic_rounding),
            global_shape=np.asarray(self.global_shape, np.int64),
        )


def nvfp4_shapes(shape: tuple[int, ...], flatten_axis: int):
    """(row_scale, col, col_scale) shapes of one example (col ones None when fa < 1)."""
    row_scale = shape[:-1] + (-(-shape[-1] // BLOCK),)
    fa = flatten_axis
    if fa < 1:
        return row_scale, None, None
    col = shape[fa:] + shape[:fa]
    col_scale = shape[fa:] + shape[: fa - 1] + (-(-shape[fa - 1] // BLOCK),)
    return row_scale, col, col_scale


def _abstract_eval(params, x, amax, col_amax, key, offset):
    del amax, col_amax, key, offset
    nb = params.n_batch
    batch, s = x.shape[:nb], x.shape[nb:]
    row_scale, col, col_scale = nvfp4_shapes(s, params.flatten_axis)
    f4, e4m3 = jnp.float4_e2m1fn, jnp.float8_e4m3fn
    return (
        ShapedArray(x.shape if params.rowwise else (0,), f4),
        ShapedArray(batch + row_scale if params.rowwise else (0,), e4m3),
        ShapedArray(batch + col if params.colwise else (0,), f4),
        ShapedArray(batch + col_scale if params.colwise else (0,), e4m3),
    )


def _final_dtypes(row, row_scale, col, col_scale):
    """uint8 E2M1 codes / E4M3 bytes of `blocks_nd.nvfp4_quantize` -> the op's dtypes."""
    e4m3 = lambda u: lax.bitcast_convert_type(u, jnp.float8_e4m3fn)  # noqa: E731
    return (
        nvfp4.e2m1_from_codes(row),
        e4m3(row_scale),
        nvfp4.e2m1_from_codes(col),
        e4m3(col_scale),
    )


def _reference(params, x, amax, col_amax, key, offset):
    nb = params.n_batch
    global_shape = params.global_shape or x.shape[nb:]

    def one(xe, ae, ce, ke):
        return blocks_nd.nvfp4_quantize(
            xe,
            ae,
            ce,
            ke,
            offset,
            block_axis=params.block_axis() - nb if params.block_axis() >= 0 else -1,
            rowwise=params.rowwise,
            colwise=params.colwise,
            use_2d=params.use_2d,
            use_rht=params.use_rht,
            sign_mask=params.rht_sign_mask,
            stochastic_rounding=params.stochastic_rounding,
            global_shape=tuple(global_shape),
        )

    if nb == 0:
        return _final_dtypes(*one(x, amax, col_amax, key))
    avals = _abstract_eval(params, x, amax, col_amax, key, offset)
    return _final_dtypes(*map_examples(one, nb, (x, amax, col_amax, key), avals))


def _batch(params, args, dims):
    x, amax, col_amax, key, offset = args
    if dims[4] is not None:
        raise NotImplementedError("eqx_quant: the nvfp4 index offset cannot be batched.")
    size = batch_size(args, dims)
    moved = [_move_or_broadcast(a, d, size) for a, d in zip(args[:4], dims[:4])]
    new = dataclasses.replace(params, n_batch=params.n_batch + 1)
    out_dims = (
        0 if params.rowwise else None,
        0 if params.rowwise else None,
        0 if params.colwise else None,
        0 if params.colwise else None,
    )
    return new, (*moved, offset), out_dims


def _blocked(params, rank: int) -> dict[int, int]:
    dims = {}
    if params.rowwise or params.use_2d:
        dims[rank - 1] = BLOCK
    if params.colwise or params.use_2d:
        dims[params.flatten_axis - 1] = BLOCK
    return dims


def _sharding_rule(params, mesh, value_types, result_types):
    del result_types
    nb, fa = params.n_batch, params.flatten_axis
    shape = tuple(value_types[0].shape)[nb:]
    n = len(shape)
    rule = _sharding.BlockRule(nb, shape, _blocked(params, n), mesh)
    b, xs = rule.batch, rule.x
    operands = [
        b + xs,
        b + rule.unrelated(1),
        b + rule.unrelated(1),
        b + rule.unrelated(1),
        rule.unrelated(1),
    ]
    if params.colwise:
        col = b + xs[fa:] + xs[:fa]
        col_scale = b + xs[fa:] + xs[: fa - 1] + [rule.scale[fa - 1]]
    results = [
        b + xs if params.rowwise else rule.dummy(),
        b + rule.scale_dims(n - 1) if params.rowwise else rule.dummy(),
        col if params.colwise else rule.dummy(),
        col_scale if params.colwise else rule.dummy(),
    ]
    return rule.render(operands, results)


def _with_global_shape(params, shape):
    return dataclasses.replace(params, global_shape=tuple(int(d) for d in shape))


def _partition(params, mesh, arg_infos, result_infos):
    del result_infos
    x_info = arg_infos[0]
    nb, fa = params.n_batch, params.flatten_axis
    shape = x_info.shape
    n = len(shape) - nb
    spec = _sharding.padded_spec(x_info.sharding, len(shape))
    spec = _sharding.keep_divisible(mesh, shape, spec)
    blocked = {nb + d: b for d, b in _blocked(params, n).items()}
    spec = _sharding.keep_blocks_whole(mesh, shape, spec, blocked)
    batch, example = spec[:nb], spec[nb:]
    inner = _with_global_shape(params, shape[nb:])
    local_sizes = [
        shape[nb + d] // _sharding.shard_count(mesh, e) if e is not None else shape[nb + d]
        for d, e in enumerate(example)
    ]

    def local_fn(bind_inner, x, amax, col_amax, key, offset):
        starts = [
            lax.axis_index(_sharding.axes_of(e)).astype(jnp.int32) * jnp.int32(size)
            if e is not None
            else jnp.int32(0)
            for e, size in zip(example, local_sizes)
        ]
        # The offset places SR indices; without SR it may be empty (and is not read).
        local_offset = offset + jnp.stack(starts) if n and offset.shape[0] else offset
        return bind_inner(x, amax, col_amax, key, local_offset, params=inner)

    p = PartitionSpec(*spec)
    none = PartitionSpec(None)
    col = PartitionSpec(*batch, *example[fa:], *example[:fa]) if params.colwise else none
    result_specs = (
        p if params.rowwise else none,
        p if params.rowwise else none,
        col,
        col,
    )
    per_example = PartitionSpec(*batch, None)
    arg_specs = (p, per_example, per_example, per_example, PartitionSpec(None))
    return local_fn, result_specs, arg_specs


def _unsharded(params, bind_inner, x, amax, col_amax, key, offset):
    inner = _with_global_shape(params, x.shape[params.n_batch :])
    return bind_inner(x, amax, col_amax, key, offset, params=inner)


nvfp4_quantize_op = Op(
    OpSpec(
        name="nvfp4_quantize",
        abstract_eval=_abstract_eval,
        inner_abstract_eval=_abstract_eval,
        reference=_reference,
        batch=_batch,
        sharding_rule=_sharding_rule,
        partition=_partition,
        unsharded=_unsharded,
    )
)
