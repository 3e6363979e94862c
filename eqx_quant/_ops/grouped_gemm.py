"""The grouped (MoE) GEMM op: one declaration, lowered to the CUTLASS kernel on CUDA
(csrc/gemm, docs/gemm.md) and to XLA's `ragged_dot` elsewhere.

`eqx_quant_grouped_gemm(a, b, counts, alpha) -> out`, float32 sums, each group's result
times `alpha[g]` (`alpha` of shape `(0,)`: none), cast to `out_dtype`:

- kind "rows": `a (M, K)`, `b (G, K, N)` (or `(G, N, K)` with `transposed`) -> `(M, N)`: row m
  of group g is `a[m] @ b[g]`, rows past the last group are 0.
- kind "wgrad": `a (M, K)` and `c (M, N)` -> `(G, K, N)`: `a_g.T @ c_g` over the rows of
  group g, 0 for an empty group. With `transposed`, both are the flat per-group transposed
  copies of `grouped_quantize` (group g's `(K, count_g)` block at `K * start_g`).

`counts` are int32, non-negative, summing to at most M (the callers clamp). FP8 operands
run on CUDA only with both K-contiguous (rows: `transposed`; wgrad: `transposed`).

Partition (sharded `jit`): kind "rows" keeps a's row sharding (data parallelism: each device
multiplies its rows), b's N sharding (column parallelism), a K sharding shared by a and b
(row parallelism, a psum of the partial products) and b's expert sharding (each device
multiplies the rows of its experts, a psum of the disjoint rows); the weights are never
gathered. Kind "wgrad" keeps K and N shardings and a row sharding shared by a and c (a psum
of the partial sums). Each device's groups and rows come from the global counts: the inner
op takes the local counts and the first local row (`first_row`).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray
from jax.lax import RaggedDotDimensionNumbers
from jax.sharding import AxisType, PartitionSpec

from .._core import vary_like, varying_axes
from . import _sharding
from ._primitive import Op, OpSpec


@dataclasses.dataclass(frozen=True)
class GroupedGemmParams:
    """Static parameters of one grouped GEMM (hashable)."""

    kind: str  # "rows" or "wgrad"
    transposed: bool
    m: int
    k: int
    n: int
    out_dtype: str
    tile: tuple[int, int] = (128, 128)  # the kernel's output tile where built (a preference)
    fast_accum: bool = False  # FP8: the tensor cores' partial sums not promoted (a preference)
    impl: str = "auto"

    def ffi_attrs(self) -> dict:
        return dict(
            kind=np.int64(0 if self.kind == "rows" else 1),
            transposed=bool(self.transposed),
            m=np.int64(self.m),
            k=np.int64(self.k),
            n=np.int64(self.n),
            tile_m=np.int64(self.tile[0]),
            tile_n=np.int64(self.tile[1]),
            fast_accum=bool(self.fast_accum),
        )


# Groups of this many rows on average or more run on the long-group tiles (csrc/gemm); shorter
# ones on 128 x 128 tiles, which a 256-row tile would leave half empty.
LONG_GROUP_ROWS = 1024


def kernel_choice(rows: int, groups: int, fp8: bool) -> tuple[tuple[int, int], bool]:
    """(tile, fast_accum) the kernel is asked for, from the mean group size and the operands.
    FP8 products accumulate in the tensor cores' own precision (CUTLASS's fast-accumulation
    kernels, what cuBLASLt does under XLA for the dense FP8 `gemm` and TE for its forward
    GEMMs; within the FP8 MMA bound on the H200): 128x128 tiles were the fastest at 8 and 128
    groups (docs/gemm.md). Pairs without a fast kernel (E4M3 x E5M2, the weight gradient)
    fall back to the promoted sums. bfloat16: 256x128 tiles for long groups."""
    if fp8:
        return (128, 128), True
    long = groups > 0 and rows // groups >= LONG_GROUP_ROWS
    return ((256, 128) if long else (128, 128)), False


def _out_shape(params, groups: int) -> tuple[int, ...]:
    if params.kind == "rows":
        return (params.m, params.n)
    return (groups, params.k, params.n)


def _abstract_eval(params, a, b, counts, alpha, *first_row):
    return (ShapedArray(_out_shape(params, counts.shape[0]), jnp.dtype(params.out_dtype)),)


def _as_bf16(x):
    """FP8 values widened exactly (XLA's CPU dot has no FP8 path)."""
    return x.astype(jnp.bfloat16) if jnp.dtype(x.dtype).itemsize == 1 else x


def _extended_counts(counts, first_row, rows: int):
    """[first_row, counts..., rows after the last group]: every row in one group."""
    head = first_row.astype(jnp.int32).reshape(1)
    tail = rows - head - jnp.sum(counts, keepdims=True)
    return jnp.concatenate([head, counts, tail])


def _rows_of_transposed(flat, counts, first_row, rows: int, cols: int):
    """The (rows, cols) rows of a flat per-group transposed buffer."""
    ext = _extended_counts(counts, first_row, rows)
    starts = jnp.cumsum(ext) - ext
    gid = jnp.repeat(jnp.arange(ext.shape[0]), ext, total_repeat_length=rows)
    local = jnp.arange(rows) - starts[gid]
    c = jnp.arange(cols)[None, :]
    at = starts[gid][:, None] * cols + c * ext[gid][:, None] + local[:, None]
    return flat[jnp.clip(at, 0, max(flat.shape[0] - 1, 0))]


def _group_of_rows(counts, first_row, rows: int):
    """Every row's group, 0-based; -1 before the first group, G past the last."""
    ext = _extended_counts(counts, first_row, rows)
    return jnp.repeat(jnp.arange(-1, counts.shape[0] + 1), ext, total_repeat_length=rows)


def _reference(params, a, b, counts, alpha, first_row):
    """XLA's ragged dots on exact values (FP8 widened to bfloat16), float32 sums: what
    `grouped_gemm` computed before the op existed, so results off CUDA are unchanged. Inside
    a partition with Explicit mesh axes left in the context (XLA has no Explicit sharding rule
    for ragged dots), one `dot_general` per group instead."""
    mesh = jax.sharding.get_abstract_mesh()
    if AxisType.Explicit in tuple(getattr(mesh, "axis_types", ())):
        return _reference_per_group(params, a, b, counts, alpha, first_row)
    m, k, n = params.m, params.k, params.n
    ext = _extended_counts(counts, first_row, m)
    a, b = _as_bf16(a), _as_bf16(b)
    f32 = jnp.float32
    factor = alpha if alpha.shape[0] else jnp.ones((counts.shape[0],), f32)
    if params.kind == "rows":
        if params.transposed:
            b = jnp.swapaxes(b, 1, 2)
        zero = jnp.zeros((1, k, n), b.dtype)
        y = jax.lax.ragged_dot(a, jnp.concatenate([zero, b, zero]), ext,
                               preferred_element_type=f32)
        zero = jnp.zeros((1,), f32)
        row_factor = jnp.repeat(jnp.concatenate([zero, factor, zero]), ext,
                                total_repeat_length=m)[:, None]
        inside = jnp.repeat(jnp.arange(counts.shape[0] + 2), ext, total_repeat_length=m)
        inside = ((inside > 0) & (inside <= counts.shape[0]))[:, None]
        # rows of no group are 0 whatever they hold (padding tokens may be Inf or NaN)
        return (jnp.where(inside, y * row_factor, 0.0).astype(params.out_dtype),)
    if params.transposed:
        a = _rows_of_transposed(a, counts, first_row, m, k)
        b = _rows_of_transposed(b, counts, first_row, m, n)
    dims = RaggedDotDimensionNumbers(
        dot_dimension_numbers=(([0], [0]), ([], [])),
        lhs_ragged_dimensions=[0],
        rhs_group_dimensions=[],
    )
    out = jax.lax.ragged_dot_general(a, b, ext, dims, preferred_element_type=f32)[1:-1]
    return ((out * factor[:, None, None]).astype(params.out_dtype),)


def _reference_per_group(params, a, b, counts, alpha, first_row):
    """One dense product per group on exact values, float32 sums."""
    m, k, n = params.m, params.k, params.n
    groups = counts.shape[0]
    gid = _group_of_rows(counts, first_row, m)
    a, b = _as_bf16(a), _as_bf16(b)
    f32 = jnp.float32
    factor = alpha if alpha.shape[0] else jnp.ones((groups,), f32)
    if params.kind == "rows":
        if params.transposed:
            b = jnp.swapaxes(b, 1, 2)

        def add_group(y, g):
            part = jnp.dot(a, b[g], preferred_element_type=f32) * factor[g]
            return jnp.where((gid == g)[:, None], part, y), None

        axes = tuple(sorted({x for v in (a, b, gid, factor) for x in varying_axes(v)}))
        y0 = vary_like(jnp.zeros((m, n), f32), axes)  # inside shard_map: typed as the sums
        y, _ = jax.lax.scan(add_group, y0, jnp.arange(groups))
        return (y.astype(params.out_dtype),)
    if params.transposed:
        a = _rows_of_transposed(a, counts, first_row, m, k)
        b = _rows_of_transposed(b, counts, first_row, m, n)

    def one_group(_, g):
        rows_of_g = jnp.where((gid == g)[:, None], a, jnp.zeros_like(a))
        out = jax.lax.dot_general(rows_of_g, b, (([0], [0]), ([], [])),
                                  preferred_element_type=f32)
        return None, out * factor[g]

    _, out = jax.lax.scan(one_group, None, jnp.arange(groups))
    return (out.reshape(groups, k, n).astype(params.out_dtype),)


def _batch(params, args, dims):
    raise NotImplementedError(
        "eqx_quant_grouped_gemm is batched by its callers' custom_vmap rules (_gemm/_ragged.py)"
    )


def _sharding_rule(params, mesh, value_types, result_types):
    del mesh, result_types
    a, b, counts, alpha = (len(t.shape) for t in value_types)
    g_alpha = "g" if value_types[3].shape[0] else "z"
    if params.kind == "rows" and a == 2:
        b_factors = "g n k" if params.transposed else "g k n"
        return f"m k, {b_factors}, g, {g_alpha} -> m n"
    if params.kind == "wgrad" and a == 2 and b == 2:
        return f"m k, m n, g, {g_alpha} -> g k n"
    return f"f, h, g, {g_alpha} -> g k n"


def _axis_index(entry):
    """This device's index along a spec entry (a name, a tuple of names, or None)."""
    index = jnp.int32(0)
    for name in _sharding.axes_of(entry):
        index = index * jax.lax.axis_size(name) + jax.lax.axis_index(name)
    return index


def _local_counts(counts, first_group, local_groups: int, first_row, local_rows: int):
    """The counts of groups [first_group, +local_groups) clipped to the rows
    [first_row, +local_rows), and the local row their first one starts on."""
    ends = jnp.cumsum(counts)
    starts = ends - counts
    s = jax.lax.dynamic_slice(starts, (first_group,), (local_groups,)) - first_row
    e = jax.lax.dynamic_slice(ends, (first_group,), (local_groups,)) - first_row
    s, e = jnp.clip(s, 0, local_rows), jnp.clip(e, 0, local_rows)
    return (e - s).astype(jnp.int32), s[:1].astype(jnp.int32)


def _partition(params, mesh, arg_infos, result_infos):
    a_info, b_info, _, alpha_info = arg_infos
    has_alpha = alpha_info.shape[0] > 0
    flat = len(a_info.shape) == 1
    if flat:  # per-group transposed buffers: no layout to split
        specs = tuple(PartitionSpec(*([None] * len(i.shape))) for i in arg_infos)
        out = PartitionSpec(*([None] * len(result_infos[0].shape)))

        def local_flat(bind_inner, a, b, counts, alpha):
            return bind_inner(a, b, counts, alpha, jnp.zeros((1,), jnp.int32), params=params)

        return local_flat, (out,), specs

    def spec_of(info):
        spec = _sharding.padded_spec(info.sharding, len(info.shape))
        return _sharding.keep_divisible(mesh, info.shape, spec)

    take = _sharding.axes_taken_once()

    sa, sb = spec_of(a_info), spec_of(b_info)
    if params.kind == "rows":
        gb = sb[0]
        kb, nb = (sb[2], sb[1]) if params.transposed else (sb[1], sb[2])
        g = take(gb)  # experts first: the weights stay where they are
        n = take(nb)
        k = take(sa[1]) if sa[1] is not None and sa[1] == kb else None
        m = take(sa[0])
        a_spec = PartitionSpec(m, k)
        b_spec = PartitionSpec(g, n, k) if params.transposed else PartitionSpec(g, k, n)
        out_spec = PartitionSpec(m, n)
        summed = _sharding.axes_of(k) + _sharding.axes_of(g)
    else:
        m = take(sa[0]) if sa[0] is not None and sa[0] == sb[0] else None
        k, n = take(sa[1]), take(sb[1])
        g = None
        a_spec, b_spec = PartitionSpec(m, k), PartitionSpec(m, n)
        out_spec = PartitionSpec(None, k, n)
        summed = _sharding.axes_of(m)
    alpha_spec = PartitionSpec(g if has_alpha else None)

    def local_fn(bind_inner, a, b, counts, alpha):
        local_rows = a.shape[0]
        local_groups = b.shape[0] if params.kind == "rows" else counts.shape[0]
        first_group = _axis_index(g) * local_groups
        first_row = _axis_index(m) * local_rows
        local, start = _local_counts(counts, first_group, local_groups, first_row, local_rows)
        n_dim = 1 if params.kind == "rows" and params.transposed else -1  # b (G, N, K)
        local_params = dataclasses.replace(params, m=local_rows, k=a.shape[1], n=b.shape[n_dim])
        (y,) = bind_inner(a, b, local, alpha, start, params=local_params)
        if summed:
            y = jax.lax.psum(y, summed)
        return (y,)

    return local_fn, (out_spec,), (a_spec, b_spec, PartitionSpec(None), alpha_spec)


def _unsharded(params, bind_inner, a, b, counts, alpha):
    return bind_inner(a, b, counts, alpha, jnp.zeros((1,), jnp.int32), params=params)


grouped_gemm_op = Op(
    OpSpec(
        name="grouped_gemm",
        abstract_eval=_abstract_eval,
        inner_abstract_eval=_abstract_eval,
        reference=_reference,
        batch=_batch,
        sharding_rule=_sharding_rule,
        partition=_partition,
        unsharded=_unsharded,
        kernel_platforms=("cuda",),
    )
)
