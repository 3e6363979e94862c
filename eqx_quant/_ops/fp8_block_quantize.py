"""`eqx_quant_fp8_block_quantize(x) -> (row, row_scale, col, col_scale)`: FP8 with one float32
scale per 1x128 block or 128x128 tile of x's 2-D view `(R, C) = (prod S[:fa], prod S[fa:])`
(docs/block_formats.md, "FP8 block scaling").

- `row`: x's shape, FP8; `row_scale`: `(ceil(R / br), ceil(C / 128))` float32 scale_inv.
- `col`: the "T" layout `S[fa:] + S[:fa]` (the 2-D view transposed), quantized along its own
  rows as the rowwise copy of x^T; `col_scale`: `(ceil(C / br), ceil(R / 128))`.
- `(br, 128)` is `(1, 128)`, or `(128, 128)` with `use_2d` (then the colwise copy holds the
  rowwise values transposed, and its scales are the rowwise ones transposed).

Absent outputs are `(0,)`. Leading vmapped dims (`n_batch`) are independent examples.

The op is declared once: the CPU kernel (`csrc/fp8_block/`) and the pure-JAX reference
(`reference/fp8_block.py`, bit-exact with TE's kernels), which the GPU runs until its kernel
lands (`impl="ffi"` raises there). The partition keeps each example whole (batch dims keep
their sharding): block scales need every element of their block.
"""

import dataclasses
import itertools
import math

import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray
from jax.sharding import PartitionSpec

from ..reference import fp8_block
from . import _sharding
from ._primitive import Op, OpSpec, map_examples


@dataclasses.dataclass(frozen=True)
class Fp8BlockQuantizeParams:
    q_dtype: str
    use_2d: bool
    power_2_scales: bool
    amax_epsilon: float
    flatten_axis: int
    rowwise: bool
    colwise: bool
    impl: str
    n_batch: int = 0

    def ffi_attrs(self) -> dict:
        return dict(
            n_batch=np.int64(self.n_batch), flatten_axis=np.int64(self.flatten_axis),
            rowwise=bool(self.rowwise), colwise=bool(self.colwise), use_2d=bool(self.use_2d),
            power_2_scales=bool(self.power_2_scales),
            amax_epsilon=np.float32(self.amax_epsilon),
        )


def _views(params, shape) -> tuple[int, int]:
    s = shape[params.n_batch :]
    fa = params.flatten_axis
    return math.prod(s[:fa]), math.prod(s[fa:])


def _abstract_eval(params, x):
    nb, fa = params.n_batch, params.flatten_axis
    batch, s = x.shape[:nb], x.shape[nb:]
    r, c = _views(params, x.shape)
    q = jnp.dtype(params.q_dtype)
    f32 = jnp.dtype(jnp.float32)
    empty = (0,)
    return (
        ShapedArray(batch + s if params.rowwise else empty, q),
        ShapedArray(batch + fp8_block.scale_grid(r, c, params.use_2d) if params.rowwise else empty,
                    f32),
        ShapedArray(batch + s[fa:] + s[:fa] if params.colwise else empty, q),
        ShapedArray(batch + fp8_block.scale_grid(c, r, params.use_2d) if params.colwise else empty,
                    f32),
    )


def _reference_one(params, x):
    fa = params.flatten_axis
    s = x.shape
    r, c = math.prod(s[:fa]), math.prod(s[fa:])
    x2d = x.reshape(r, c)
    kw = dict(q_dtype=params.q_dtype, use_2d=params.use_2d,
              power_2_scales=params.power_2_scales, epsilon=params.amax_epsilon)
    empty_q = jnp.zeros((0,), params.q_dtype)
    empty_s = jnp.zeros((0,), jnp.float32)
    row, row_scale, col, col_scale = empty_q, empty_s, empty_q, empty_s
    if params.rowwise or params.use_2d:
        q, scale = fp8_block.quantize_2d(x2d, **kw)
        if params.rowwise:
            row, row_scale = q.reshape(s), scale
    if params.colwise:
        if params.use_2d:  # a 128x128 tile's scale is its transpose's: the same values
            q_t, col_scale = q.T, scale.T
        else:
            q_t, col_scale = fp8_block.quantize_2d(x2d.T, **kw)
        col = q_t.reshape(s[fa:] + s[:fa])
    return row, row_scale, col, col_scale


def _reference(params, x):
    nb = params.n_batch
    if nb == 0:
        return _reference_one(params, x)
    one = dataclasses.replace(params, n_batch=0)
    return map_examples(
        lambda xe: _reference_one(one, xe), nb, (x,), _abstract_eval(params, x)
    )


def _present(params) -> tuple[bool, ...]:
    return (params.rowwise, params.rowwise, params.colwise, params.colwise)


def _batch(params, args, dims):
    (x,), (d,) = args, dims
    new = dataclasses.replace(params, n_batch=params.n_batch + 1)
    return new, (jnp.moveaxis(x, d, 0),), tuple(0 if p else None for p in _present(params))


def _sharding_rule(params, mesh, value_types, result_types):
    """Batch dims are shared; every other dim is its own factor (no sharding propagates
    through a block)."""
    del mesh
    nb = params.n_batch
    b = _sharding.factors("b", nb)
    counter = itertools.count()

    def fresh(k):
        return [f"u{next(counter)}" for _ in range(k)]

    x = b + fresh(len(value_types[0].shape) - nb)
    results = [
        b + fresh(len(t.shape) - nb) if present else fresh(1)
        for t, present in zip(result_types, _present(params))
    ]
    return ", ".join(" ".join(g) for g in [x] + results).replace(", ", " -> ", 1)


def _partition(params, mesh, arg_infos, result_infos):
    nb = params.n_batch
    x_info = arg_infos[0]
    spec = _sharding.keep_divisible(
        mesh, x_info.shape, _sharding.padded_spec(x_info.sharding, len(x_info.shape))
    )
    batch = spec[:nb]
    x_spec = PartitionSpec(*batch, *([None] * (len(x_info.shape) - nb)))
    result_specs = tuple(
        PartitionSpec(*batch, *([None] * (len(info.shape) - nb))) if present
        else PartitionSpec(None)
        for info, present in zip(result_infos, _present(params))
    )

    def local_fn(bind_inner, x):
        return bind_inner(x, params=params)

    return local_fn, result_specs, (x_spec,)


fp8_block_quantize_op = Op(
    OpSpec(
        name="fp8_block_quantize",
        abstract_eval=_abstract_eval,
        inner_abstract_eval=_abstract_eval,
        reference=_reference,
        batch=_batch,
        sharding_rule=_sharding_rule,
        partition=_partition,
        kernel_platforms=("cpu",),
        ffi_off_kernel_platforms="error",
    )
)
