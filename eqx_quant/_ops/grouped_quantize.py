"""The grouped (MoE) ops of docs/grouped.md: one declaration each, shared by the pure-JAX
reference and the kernels.

- `eqx_quant_grouped_fp8_quantize(x, scale, group_sizes) -> (row, col, scale_inv, amax)`
- `eqx_quant_grouped_mxfp8_quantize(x, group_sizes) -> (row, row_scale, col, col_scale)`
- `eqx_quant_grouped_nvfp4_quantize(x, amax, keys, group_sizes) -> (row, row_scale, col,
  col_scale)`: `float4_e2m1fn` data (packed two per byte by the kernels, as the dense NVFP4
  op's: no conversion pass follows) and E4M3 scale bytes; `keys` is `(G, 2)` with stochastic
  rounding, else `(G, 0)` (not read)
- `eqx_quant_grouped_fp8_block_quantize(x, group_sizes) -> (row, row_scale, col, col_scale)`:
  FP8 data (rowwise `(R, N)`, colwise flat T), float32 scale_inv matrices (1x128 or
  128x128 blocks from each group's start). A CPU kernel (each group through the dense
  kernel); on CUDA its implementation moves the groups' rows into a 128-aligned buffer and
  runs the dense FP8 block quantize op there (its kernel where it is on), and `impl="ffi"`
  raises
- `eqx_quant_grouped_dbias(x, group_sizes) -> dbias` (in x's dtype: the float32 tree sums cast,
  NaN canonical, by the kernel)

`x` is the 2-D view `Bt + (R, N)` (`Bt` = vmapped batch dims, each example its own grouped
problem). The ragged row axis is never split across devices: the partition keeps it whole
(batch dims keep their sharding, and `grouped_dbias` its column sharding), except when group
g is unit g (`one_group_per_unit`, a weight-like `[G, K, N]` quantized with
`group_sizes=None`) and the rows are sharded along whole groups: each device then quantizes
its own experts (expert parallelism), its data sharded the same way (the per-group transposed
copies are consecutive per group, so a flat colwise buffer splits along the groups too).
MXFP8's and NVFP4's packed scale buffers are whole on every device: all groups' regions have
one size there, so each device's regions are a prefix of its buffer and the partition
all-gathers those prefixes (scales only; the data never moves). FP8 block scaling keeps the
rows whole.
"""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray
from jax.sharding import PartitionSpec

from ..reference import cast_canonical, fp8_block, grouped, mxfp8
from ..reference.nvfp4 import NVFP4_BLOCK, e2m1_from_codes
from . import _sharding
from ._primitive import Op, OpSpec, batch_first, map_examples
from .fp8_block_quantize import Fp8BlockQuantizeParams, fp8_block_quantize_op


@dataclasses.dataclass(frozen=True)
class GroupedParams:
    """Static parameters of one grouped op call (hashable). `kind` is the op family:
    "fp8", "mxfp8", "nvfp4", "fp8_block" or "dbias"; fields that a family does not use keep
    defaults."""

    kind: str
    rows_per_unit: int
    impl: str
    q_dtype: str = "float8_e4m3fn"
    rowwise: bool = False
    colwise: bool = False
    use_2d: bool = False
    stochastic_rounding: bool = False
    power_2_scales: bool = False  # fp8_block
    amax_epsilon: float = 0.0  # fp8_block
    n_batch: int = 0
    # Group g is unit g (a weight-like `[G, K, N]`, `group_sizes=None`): the FP8 and dbias
    # ops may then split the groups over devices (see the module doc).
    one_group_per_unit: bool = False

    @property
    def block(self) -> int:
        return NVFP4_BLOCK if self.kind == "nvfp4" else mxfp8.MX_BLOCK

    def ffi_attrs(self) -> dict:
        attrs = dict(n_batch=np.int64(self.n_batch), rows_per_unit=np.int64(self.rows_per_unit))
        if self.kind != "dbias":
            attrs.update(rowwise=bool(self.rowwise), colwise=bool(self.colwise))
        if self.kind == "nvfp4":
            attrs.update(
                use_2d=bool(self.use_2d), stochastic_rounding=bool(self.stochastic_rounding)
            )
        if self.kind == "fp8_block":
            attrs.update(use_2d=bool(self.use_2d), power_2_scales=bool(self.power_2_scales),
                         amax_epsilon=np.float32(self.amax_epsilon))
        return attrs


def _abstract_eval(params, x, *operands):
    nb = params.n_batch
    batch, (r, n) = x.shape[:nb], x.shape[nb:]
    g = operands[-1].shape[-1]
    if params.kind == "dbias":
        return (ShapedArray(batch + (g, n), x.dtype),)
    if params.kind == "fp8":
        q = jnp.dtype(params.q_dtype)
        return (
            ShapedArray(batch + (r, n) if params.rowwise else (0,), q),
            ShapedArray(batch + (r * n,) if params.colwise else (0,), q),
            ShapedArray(batch + (g,), jnp.float32),
            ShapedArray(batch + (g,), jnp.float32),
        )
    if params.kind == "fp8_block":
        return _fp8_block_avals(params, batch, r, n, g)
    data = jnp.dtype(params.q_dtype) if params.kind == "mxfp8" else jnp.dtype(jnp.float4_e2m1fn)
    col_shape = (r, n) if params.kind == "mxfp8" else (r * n,)
    row_len = grouped.scale_buffer_length(r, n, g, params.block, colwise=False)
    col_len = grouped.scale_buffer_length(r, n, g, params.block, colwise=True)
    u8 = jnp.dtype(jnp.uint8)
    return (
        ShapedArray(batch + (r, n) if params.rowwise else (0,), data),
        ShapedArray(batch + (row_len,) if params.rowwise else (0,), u8),
        ShapedArray(batch + col_shape if params.colwise else (0,), data),
        ShapedArray(batch + (col_len,) if params.colwise else (0,), u8),
    )


def _fp8_block_avals(params, batch, r: int, n: int, g: int) -> tuple:
    q, f32 = jnp.dtype(params.q_dtype), jnp.dtype(jnp.float32)
    units = grouped.most_units(r, g, fp8_block.BLOCK)
    nb = -(-n // fp8_block.BLOCK)
    row_s = (units, nb) if params.use_2d else (r, nb)
    col_s = (nb, units) if params.use_2d else (n, units)
    return (
        ShapedArray(batch + (r, n) if params.rowwise else (0,), q),
        ShapedArray(batch + row_s if params.rowwise else (0,), f32),
        ShapedArray(batch + (r * n,) if params.colwise else (0,), q),
        ShapedArray(batch + col_s if params.colwise else (0,), f32),
    )


def _dense_fp8_block(params):
    """The dense FP8 block quantize op on one device's 2-D view, with this call's `impl` (so
    its kernel runs where it has one): `f(x2d, transposed) -> (data, scale_inv)`, the colwise
    copy (`x2d.T` quantized) with `transposed`."""

    def quantize(x2d, transposed):
        dense = Fp8BlockQuantizeParams(
            params.q_dtype, params.use_2d, params.power_2_scales, params.amax_epsilon,
            flatten_axis=1, rowwise=not transposed, colwise=transposed, impl=params.impl,
        )
        row, row_scale, col, col_scale = fp8_block_quantize_op.bind_inner(x2d, params=dense)
        return (col, col_scale) if transposed else (row, row_scale)

    return quantize


def _reference_one(params, x, *operands):
    common = dict(rows_per_unit=params.rows_per_unit)
    if params.kind == "dbias":
        return (cast_canonical(grouped.grouped_dbias(x, *operands, **common), x.dtype),)
    layout = dict(rowwise=params.rowwise, colwise=params.colwise)
    if params.kind == "fp8":
        return grouped.grouped_fp8_quantize(
            x, *operands, q_dtype=params.q_dtype, **common, **layout
        )
    if params.kind == "mxfp8":
        return grouped.grouped_mxfp8_quantize(
            x, *operands, q_dtype=params.q_dtype, **common, **layout
        )
    if params.kind == "fp8_block":
        return grouped.grouped_fp8_block_quantize(
            x, *operands, q_dtype=params.q_dtype, use_2d=params.use_2d,
            power_2_scales=params.power_2_scales, epsilon=params.amax_epsilon, **common, **layout,
            quantize_dense=_dense_fp8_block(params),
        )
    row, row_scale, col, col_scale = grouped.grouped_nvfp4_quantize(
        x,
        *operands,
        use_2d=params.use_2d,
        stochastic_rounding=params.stochastic_rounding,
        **common,
        **layout,
    )
    return e2m1_from_codes(row), row_scale, e2m1_from_codes(col), col_scale


def _reference(params, x, *operands):
    nb = params.n_batch
    if nb == 0:
        return tuple(_reference_one(params, x, *operands))
    return map_examples(
        lambda *a: tuple(_reference_one(params, *a)),
        nb,
        (x,) + operands,
        _abstract_eval(params, x, *operands),
    )


def _batch(params, args, dims):
    _, moved = batch_first(args, dims)
    new = dataclasses.replace(params, n_batch=params.n_batch + 1)
    return new, moved, tuple(0 if p else None for p in _present(params))


def _present(params) -> tuple[bool, ...]:
    """Which results the call writes (absent ones have shape (0,))."""
    if params.kind == "dbias":
        return (True,)
    if params.kind == "fp8":
        return (params.rowwise, params.colwise, True, True)
    return (params.rowwise, params.rowwise, params.colwise, params.colwise)


def _example_ranks(params) -> tuple[int, ...]:
    """Per-example ranks of the operands after x (e.g. scale (G,), keys (G, 2))."""
    ranks = {"fp8": (1, 1), "mxfp8": (1,), "nvfp4": (1, 2, 1), "fp8_block": (1,), "dbias": (1,)}
    return ranks[params.kind]


def _sharding_rule(params, mesh, value_types, result_types):
    """Batch dims are shared; the columns are shared with dbias; every other dim is its own
    factor (the ragged rows never propagate a sharding)."""
    del mesh
    nb = params.n_batch
    b = _sharding.factors("b", nb)
    counter = itertools.count()

    def fresh(k):
        return [f"u{next(counter)}" for _ in range(k)]

    def join(groups):
        return ", ".join(" ".join(g) for g in groups)

    if params.one_group_per_unit and params.kind in _PACKED_SCALES:
        # As below for the data (rows (g k); NVFP4's flat colwise copy (g w)); the scale
        # buffers are whole on every device (the partition gathers them).
        k = params.rows_per_unit
        n = value_types[0].shape[-1]
        operands = [b + ["(g k)", "n"]] + [b + ["g"] + fresh(r - 1) for r in _example_ranks(params)]
        col = ["(g w)"] if params.kind == "nvfp4" else ["(g k)"] + fresh(1)
        shapes = [["(g k)"] + fresh(1), fresh(1), col, fresh(1)]
        results = [b + shape if present else fresh(1)
                   for shape, present in zip(shapes, _present(params))]
        sizes = {"k": k}
        if params.colwise and params.kind == "nvfp4":
            sizes["w"] = k * n
        return f"{join(operands)} -> {join(results)}", sizes

    if params.one_group_per_unit and params.kind in ("fp8", "dbias"):
        # Group g is unit g: the rows are (g k) with k = rows_per_unit, and every per-group
        # operand and result splits along g (the FP8 op's flat colwise copy as (g w), w the
        # elements of one group).
        k = params.rows_per_unit
        n = value_types[0].shape[-1]
        x = b + ["(g k)", "n"]
        operands = [x] + [b + ["g"] + fresh(r - 1) for r in _example_ranks(params)]
        sizes = {"k": k}
        if params.kind == "dbias":
            results = [b + ["g", "n"]]
        else:
            shapes = [["(g k)"] + fresh(1), ["(g w)"], ["g"], ["g"]]
            results = [b + shape if present else fresh(1)
                       for shape, present in zip(shapes, _present(params))]
            if params.colwise:
                sizes["w"] = k * n
        return f"{join(operands)} -> {join(results)}", sizes

    x = b + ["r", "n"]
    operands = [x] + [b + fresh(k) for k in _example_ranks(params)]
    results = []
    for t, present in zip(result_types, _present(params)):
        if params.kind == "dbias":
            results.append(b + fresh(1) + ["n"])
        elif not present:
            results.append(fresh(1))
        else:
            results.append(b + fresh(len(t.shape) - nb))
    return f"{join(operands)} -> {join(results)}"


def _group_axes(params, mesh, spec, groups: int):
    """The mesh axes the rows may be split over: those of x's row dim when group g is unit g,
    the op lays its data out per group (all but FP8 block scaling) and the groups split
    evenly."""
    rows = spec[params.n_batch]
    splits = ("fp8", "dbias") + _PACKED_SCALES
    if not params.one_group_per_unit or params.kind not in splits or rows is None:
        return None
    return rows if groups % _sharding.shard_count(mesh, rows) == 0 else None


def _partition(params, mesh, arg_infos, result_infos):
    nb = params.n_batch
    x_info = arg_infos[0]
    spec = _sharding.padded_spec(x_info.sharding, len(x_info.shape))
    spec = _sharding.keep_divisible(mesh, x_info.shape, spec)
    batch = spec[:nb]
    cols = spec[nb + 1] if params.kind == "dbias" else None
    groups = arg_infos[-1].shape[-1]
    rows = _group_axes(params, mesh, spec, groups)
    x_spec = PartitionSpec(*batch, rows, cols)
    arg_specs = (x_spec,) + tuple(
        PartitionSpec(*batch, rows, *([None] * (k - 1))) for k in _example_ranks(params)
    )
    result_specs = []
    for info, present in zip(result_infos, _present(params)):
        rank = len(info.shape)
        if params.kind == "dbias":
            result_specs.append(PartitionSpec(*batch, rows, cols))
        elif not present:
            result_specs.append(PartitionSpec(None))
        elif len(result_specs) in _scale_results(params):
            result_specs.append(PartitionSpec(*batch, None))
        else:
            result_specs.append(PartitionSpec(*batch, rows, *([None] * (rank - nb - 1))))

    def local_fn(bind_inner, *args):
        outs = bind_inner(*args, params=params)
        if rows is None or not _scale_results(params):
            return outs
        local_groups = groups // _sharding.shard_count(mesh, rows)
        return _gathered_scales(params, outs, rows, local_groups, x_info.shape[-1],
                                result_infos)

    return local_fn, tuple(result_specs), arg_specs


# The block formats whose scale buffers pack every group's swizzled scales into one buffer.
_PACKED_SCALES = ("mxfp8", "nvfp4")


def _scale_results(params) -> tuple[int, ...]:
    """The results that are packed scale buffers (row_scale, col_scale)."""
    return (1, 3) if params.kind in _PACKED_SCALES else ()


def _gathered_scales(params, outs, rows, local_groups: int, cols: int, result_infos):
    """A device's results with its scale buffers made whole: with group g unit g, every
    group's scale region has the same size (docs/grouped.md, "Block scales"), so a device's
    groups fill the first `local_groups x region` bytes of its buffer, and the whole buffer is
    the devices' prefixes in group order, then the zero bytes after the last region. Only the
    scales move (1/32 or 1/16 of the data's elements): each device's experts stay on it."""
    nb = params.n_batch
    outs = list(outs)
    for i, colwise in ((1, False), (3, True)):
        if not _present(params)[i]:
            continue
        region = grouped.scale_buffer_length(params.rows_per_unit, cols, 1, params.block,
                                             colwise=colwise)
        prefix = outs[i][..., : local_groups * region]
        whole = jax.lax.all_gather(prefix, _sharding.axes_of(rows), axis=nb, tiled=True)
        pad = result_infos[i].shape[-1] - whole.shape[-1]
        outs[i] = jnp.pad(whole, [(0, 0)] * nb + [(0, pad)])
    return tuple(outs)


def _op(name: str, **kernels) -> Op:
    return Op(
        OpSpec(
            name=name,
            abstract_eval=_abstract_eval,
            inner_abstract_eval=_abstract_eval,
            reference=_reference,
            batch=_batch,
            sharding_rule=_sharding_rule,
            partition=_partition,
            **kernels,
        )
    )


grouped_fp8_quantize_op = _op("grouped_fp8_quantize")
grouped_mxfp8_quantize_op = _op("grouped_mxfp8_quantize")
grouped_nvfp4_quantize_op = _op("grouped_nvfp4_quantize")
# The CPU kernel; on CUDA its reference composes the dense op's (`_dense_fp8_block`), whose
# kernel runs where it is on, and impl="ffi" raises: its CUDA kernel is built but not taken
# until tests/cuda/test_cuda_grouped_fp8_block.py has passed on the H200.
grouped_fp8_block_quantize_op = _op(
    "grouped_fp8_block_quantize", kernel_platforms=("cpu",), ffi_off_kernel_platforms="error"
)
grouped_dbias_op = _op("grouped_dbias")
