"""The MXFP8 quantize op: 1x32 blocks with E8M0 scales, rowwise and/or colwise in one pass,
and optionally the fused bias gradient.

`eqx_quant_mxfp8_quantize(x) -> (row, row_scale, col, col_scale, dbias)` (docs/block_formats.md):
rowwise blocks along the last axis, colwise blocks along axis `fa - 1`, both in x's layout;
scales as E8M0 bytes (`uint8`); with `with_dbias` the canonical tree sum of x over `S[:fa]`
in x's dtype (`B + S[fa:]`, exactly the FP8 op's dbias), else (0,). No per-tensor quantity,
so without dbias a batch (vmap) is just more rows and a shard needs no collective: the
partition only keeps blocks whole on each device.

The kernel (inner primitive) returns the dbias as the node sums and cast of `_dbias.py`. It
takes one tree per example over at most one axis longer than 1 (a (tokens, hidden) gradient,
or one whose other reduced axes are 1), and x is read once on the GPU: when K = 32 * 2^j (up
to MAX_TILE_NODES 32-row blocks) the nodes are its 32-row blocks and the MXFP8 tile kernel
writes their sums (with both layouts, those of the colwise blocks); otherwise, rowwise only,
the dbias kernel writes the rowwise blocks. Reduced axes that may run as one (`_mergeable`: e.g.
(batch, sequence) with a
power-of-two batch) are merged first. Other trees (a kept axis, or reduced axes that do not
merge) take the FP8 op's dbias-only form next to this op's kernel.
"""

import dataclasses

import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray
from jax.sharding import PartitionSpec

from ..reference import blocks_nd, mxfp8
from . import _dbias, _sharding
from ._primitive import Op, OpSpec, map_examples
from .fp8_quantize import dbias_only_local, dbias_only_params, fp8_quantize_op

BLOCK = mxfp8.MX_BLOCK


@dataclasses.dataclass(frozen=True)
class Mxfp8QuantizeParams:
    """Static parameters of one `mxfp8_quantize` call (hashable)."""

    q_dtype: str
    flatten_axis: int  # per example; >= 1 when colwise
    rowwise: bool
    colwise: bool
    impl: str
    n_batch: int = 0
    with_dbias: bool = False
    dbias_keep: int = 0  # inner primitive only
    dbias_split: int = 1  # inner primitive only
    dbias_cast: bool = False  # inner primitive only

    def block_axis(self) -> int:
        return self.n_batch + self.flatten_axis - 1 if self.colwise else -1

    def ffi_attrs(self) -> dict:
        return dict(
            block_axis=np.int64(self.block_axis()),
            n_batch=np.int64(self.n_batch),
            flatten_axis=np.int64(self.flatten_axis),
            dbias_keep=np.int64(self.dbias_keep),
            dbias_split=np.int64(self.dbias_split),
            rowwise=bool(self.rowwise),
            colwise=bool(self.colwise),
            with_dbias=bool(self.with_dbias),
            dbias_cast=bool(self.dbias_cast),
        )


def scale_shapes(shape: tuple[int, ...], flatten_axis: int, block: int):
    """(rowwise, colwise) unpadded scale shapes of one example of `shape` (colwise blocks
    along axis `flatten_axis - 1`; None when that axis does not exist)."""
    row = shape[:-1] + (-(-shape[-1] // block),)
    if flatten_axis < 1:
        return row, None
    k = flatten_axis - 1
    return row, shape[:k] + (-(-shape[k] // block),) + shape[k + 1 :]


def _quantized_avals(params, x):
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


def _abstract_eval(params, x):
    return _quantized_avals(params, x) + (_dbias.result_aval(params, x),)


def _inner_abstract_eval(params, x):
    return _quantized_avals(params, x) + _dbias.kernel_avals(params, x)


def _reference(params, x):
    def one(xe):
        return blocks_nd.mxfp8_quantize(
            xe, params.q_dtype, params.flatten_axis - 1, params.rowwise, params.colwise
        )

    nb = params.n_batch
    avals = _inner_abstract_eval(params, x)
    if nb == 0:
        outs = one(x)
    else:
        outs = map_examples(one, nb, (x,), avals)
    if not params.with_dbias:
        return (*outs, jnp.zeros((0,), jnp.float32), jnp.zeros((0,), x.dtype))
    # The FP8 reference's dbias outputs (the same trees, bit for bit).
    fp8 = dbias_only_params(
        nb,
        params.flatten_axis,
        "reference",
        dbias_keep=params.dbias_keep,
        dbias_split=params.dbias_split,
        dbias_cast=params.dbias_cast,
    )
    scale = jnp.ones(x.shape[:nb] + (1,), jnp.float32)
    nodes, cast = fp8_quantize_op.spec.reference(fp8, x, scale)[4:]
    return (*outs, nodes, cast)


def _batch(params, args, dims):
    (x,), (d,) = args, dims
    new = dataclasses.replace(params, n_batch=params.n_batch + 1)
    out_dims = (
        0 if params.rowwise else None,
        0 if params.rowwise else None,
        0 if params.colwise else None,
        0 if params.colwise else None,
        0 if params.with_dbias else None,
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
        b + rule.x[fa:] if params.with_dbias else rule.dummy(),
    ]
    return rule.render([x], results)


def _partition(params, mesh, arg_infos, result_infos):
    del result_infos
    x_info = arg_infos[0]
    nb, fa = params.n_batch, params.flatten_axis
    rank = len(x_info.shape) - nb
    spec = _sharding.padded_spec(x_info.sharding, len(x_info.shape))
    spec = _sharding.keep_divisible(mesh, x_info.shape, spec)
    blocked = {nb + (d % rank): b for d, b in _blocked_dims(params).items()}
    spec = _sharding.keep_blocks_whole(mesh, x_info.shape, spec, blocked)
    if params.with_dbias:
        spec = _dbias.power_of_two_reduced(spec, mesh, nb, fa)
    p = PartitionSpec(*spec)
    none = PartitionSpec(None)
    example = spec[nb:]

    def local_fn(bind_inner, x):
        return _local(params, example, bind_inner, x)

    result_specs = (
        p if params.rowwise else none,
        p if params.rowwise else none,
        p if params.colwise else none,
        p if params.colwise else none,
        PartitionSpec(*spec[:nb], *example[fa:]) if params.with_dbias else none,
    )
    return local_fn, result_specs, (p,)


# The most 32-row nodes the kernel returns per tree (kMaxMxfp8DbiasSplit in
# csrc/common/mxfp8_problem.h): one tree of up to 32768 rows.
MAX_TILE_NODES = 1024


def _block_nodes(params, x_shape, keep: int) -> int | None:
    """The number of 32-row blocks along K = S[fa-1] when they are the nodes of the tree (K =
    32 * 2^j, the only reduced axis, split: on the GPU the MXFP8 tile kernel writes their sums
    in its read of x), with both layouts (the colwise blocks) or rowwise only (whole rowwise
    blocks in the last dim); else None."""
    nb, fa = params.n_batch, params.flatten_axis
    s = x_shape[nb:]
    if not params.rowwise or keep != fa - 1:
        return None
    if not params.colwise and s[-1] % BLOCK:
        return None
    if any(d != 1 for d in s[: fa - 1]) or s[fa - 1] % BLOCK:
        return None
    nodes = s[fa - 1] // BLOCK
    return nodes if 0 < nodes <= MAX_TILE_NODES and nodes & (nodes - 1) == 0 else None


def _one_tree(x_shape, n_batch: int, flatten_axis: int, keep: int) -> bool:
    """Whether the kernel takes the local dbias: one tree per example (the kept dims are 1)
    over at most one reduced axis longer than 1."""
    s = x_shape[n_batch:]
    return all(d == 1 for d in s[:keep]) and sum(d > 1 for d in s[keep:flatten_axis]) <= 1


def _mergeable(params, x_shape) -> bool:
    """Whether the reduced axes S[:fa] (none sharded, two or more longer than 1) may run as
    one axis of prod(S[:fa]) rows: the nested tree over them is then the flat one (every
    axis but the last a power of two: each halving of the flat tree splits the leading axis),
    rowwise blocks stay in the last axis (fa < rank) and colwise blocks start at each
    K = S[fa-1] row (K % 32 == 0). A (batch, sequence, hidden) gradient with a power-of-two
    batch is then read once on the GPU."""
    nb, fa = params.n_batch, params.flatten_axis
    s = x_shape[nb:]
    if fa >= len(s) or sum(d > 1 for d in s[:fa]) < 2:
        return False
    if any(d & (d - 1) for d in s[: fa - 1]):
        return False
    return not params.colwise or s[fa - 1] % BLOCK == 0


def _local(params, example_spec, bind_inner, x):
    """The op on one device's shards (`example_spec` = the mesh axes of each per-example dim,
    None if unsharded): the kernel, then for a sharded reduced axis the dbias' gather."""
    nb, fa = params.n_batch, params.flatten_axis
    if not params.with_dbias:
        return (*bind_inner(x, params=params)[:4], jnp.zeros((0,), x.dtype))
    dbias_plan = _dbias.plan(x.shape, nb, fa, example_spec)
    if dbias_plan.cast and _mergeable(params, x.shape):
        # One axis of rows: the same bytes and the same tree.
        s = x.shape[nb:]
        merged = x.reshape(x.shape[:nb] + (int(np.prod(s[:fa])),) + s[fa:])
        outs = _local(
            dataclasses.replace(params, flatten_axis=1),
            [None] * (len(s) - fa + 1),
            bind_inner,
            merged,
        )
        avals = _abstract_eval(params, x)
        return tuple(o.reshape(a.shape) for o, a in zip(outs, avals))
    if not _one_tree(x.shape, nb, fa, dbias_plan.keep):
        quantized = bind_inner(x, params=dataclasses.replace(params, with_dbias=False))[:4]
        return (*quantized, dbias_only_local(x, example_spec, nb, fa, params.impl))
    block_nodes = _block_nodes(params, x.shape, dbias_plan.keep)
    inner = dataclasses.replace(
        params,
        dbias_keep=dbias_plan.keep,
        dbias_split=dbias_plan.split if block_nodes is None else block_nodes,
        dbias_cast=dbias_plan.cast,
    )
    *quantized, nodes, dbias = bind_inner(x, params=inner)
    if not dbias_plan.cast:
        dbias = _dbias.finish(nodes, x.dtype, nb, dbias_plan.keep, example_spec[:fa])
    return (*quantized, dbias)


def _unsharded(params, bind_inner, x):
    rank = x.ndim - params.n_batch
    return _local(params, [None] * rank, bind_inner, x)


mxfp8_quantize_op = Op(
    OpSpec(
        name="mxfp8_quantize",
        abstract_eval=_abstract_eval,
        inner_abstract_eval=_inner_abstract_eval,
        reference=_reference,
        batch=_batch,
        sharding_rule=_sharding_rule,
        partition=_partition,
        unsharded=_unsharded,
    )
)
