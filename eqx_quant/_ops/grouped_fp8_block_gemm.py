"""`eqx_quant_grouped_fp8_block_gemm(a, a_scale, b, b_scale, group_sizes) -> out`: the MoE
expert GEMM (forward and input gradient) on FP8 block-scaled operands (DeepSeek-V3's recipe,
docs/block_formats.md "FP8 block scaling"; docs/gemm.md "Grouped FP8 block-scaled GEMM").

- `a (M, K)` E4M3 token rows, contiguous groups of `group_sizes (G,)` int32 rows, clamped as
  `grouped_quantize` clamps them (a negative size counts as 0, the groups end at row M; rows
  past the last group are 0 in the output);
- `a_scale (M, ceil(K/128))` float32: one `scale_inv` per row per 128 of K, the compact
  rowwise 1x128 scales as the quantizer stores them (row-major);
- `b (G, N, K)` E4M3, one weight per group, K contiguous;
- `b_scale` float32, one per 128x128 tile, `(G, ceil(N/128), ceil(K/128))`, or one per row
  per 128 of K, `(G, N, ceil(K/128))` (`b_tiles` says which);
- `out (M, N)` bfloat16 or float32: row m of group g is

      out[m, n] = sum_j a_scale[m, j] * b_scale[g, n, j] * sum_{k in block j} a[m, k] b[g, n, k]

  in float32 (the scales applied to each 128-long partial sum, the last block partial),
  rounded once to `out_dtype`.

On CUDA: CUTLASS's Hopper pointer-array grouped GEMM with blockwise scaling
(`csrc/gemm/grouped_fp8_block_gemm_*`, its group arguments filled on the device: no host
sync); it needs K a multiple of 16 and N of 8 (bfloat16 out) or 4 (float32 out). Its GPU test
(`tests/cuda/test_cuda_grouped_fp8_block_gemm.py`) has not run yet, so `impl="auto"` runs the
reference on every platform until it has (`KERNEL_BY_DEFAULT`); `impl="ffi"` runs the kernel
on CUDA (and raises elsewhere). The reference (CPU, `impl="reference"`): each 128-long K
block of every group a ragged dot of float32 values at HIGHEST precision, times its scales.

Batching: vmapped problems (each with its own sizes) run the reference, example by example.
Sharding: the rows of `a` (data parallel), the experts of `b` (expert parallel: a psum of
disjoint rows), N (whole 128-tiles) and a K split into whole 128-blocks on both operands (a
psum of float32 partial sums) stay local; the weights are never gathered.
"""

import dataclasses

import jax
import jax.numpy as jnp
from jax.core import ShapedArray
from jax.sharding import PartitionSpec

from . import _sharding
from ._primitive import Op, OpSpec, batch_first, map_examples
from .grouped_gemm import _axis_index, _local_counts

BLOCK = 128
IMPLS = ("auto", "ffi", "reference")
OUT_DTYPES = ("bfloat16", "float32")
# Whether impl="auto" takes the CUDA kernel: not before its GPU test has passed on the H200.
KERNEL_BY_DEFAULT = False


def kernel_runs_by_default(platform: str) -> bool:
    """Whether `impl="auto"` runs the op's compiled kernel on `platform` (else its reference):
    what a caller asks before it routes a product through the op rather than its own path."""
    return KERNEL_BY_DEFAULT and platform in grouped_fp8_block_gemm_op.spec.kernel_platforms


@dataclasses.dataclass(frozen=True)
class GroupedFp8BlockGemmParams:
    """Static parameters of one grouped FP8 block GEMM (hashable)."""

    b_tiles: bool  # b_scale per 128x128 tile, else per row per 128 of K
    out_dtype: str = "bfloat16"
    impl: str = "auto"
    n_batch: int = 0  # vmapped examples: the reference, one example at a time

    def __post_init__(self):
        if self.impl not in IMPLS:
            raise ValueError(f"GroupedFp8BlockGemmParams: impl must be one of {IMPLS}, "
                             f"got {self.impl!r}")
        if self.out_dtype not in OUT_DTYPES:
            raise ValueError(f"GroupedFp8BlockGemmParams: out_dtype must be one of "
                             f"{OUT_DTYPES}, got {self.out_dtype!r}")
        # Resolved here rather than in the public function, so that binding the op directly
        # with "auto" cannot reach an unverified kernel either.
        if self.impl == "auto" and not KERNEL_BY_DEFAULT:
            object.__setattr__(self, "impl", "reference")

    def ffi_attrs(self) -> dict:
        return dict(b_tiles=bool(self.b_tiles))


def _abstract_eval(params, a, a_scale, b, b_scale, group_sizes, *first_row):
    del a_scale, b_scale, group_sizes, first_row
    return (ShapedArray(a.shape[:-1] + (b.shape[-2],), jnp.dtype(params.out_dtype)),)


def clamped_counts(group_sizes, rows):
    """Each group's rows, clamped as `grouped_quantize` clamps them: a negative size counts as
    0 and the groups end at row `rows` (a saturating prefix sum, which never overflows)."""
    sizes = jnp.clip(group_sizes.astype(jnp.int32), 0, rows)
    if sizes.shape[0] == 0:
        return sizes
    ends = jax.lax.associative_scan(lambda x, y: jnp.minimum(x + y, rows), sizes)
    return ends - jnp.concatenate([jnp.zeros((1,), jnp.int32), ends[:-1]])


def _reference_one(params, a, a_scale, b, b_scale, group_sizes, first_row):
    m, k = a.shape
    groups, n, _ = b.shape
    kb = a_scale.shape[1]
    f32 = jnp.float32
    first = first_row.astype(jnp.int32).reshape(1)
    counts = clamped_counts(group_sizes, m - first[0])
    # Every row in one of G + 2 groups: the rows before the first group and after the last
    # multiply zero weights (and are set to 0 below, whatever their values and scales).
    ext = jnp.concatenate([first, counts, m - first - jnp.sum(counts, keepdims=True)])
    gid = jnp.repeat(jnp.arange(groups + 2), ext, total_repeat_length=m)
    inside = ((gid > 0) & (gid <= groups))[:, None]
    padded = kb * BLOCK
    af = jnp.pad(a.astype(f32), ((0, 0), (0, padded - k)))
    bf = jnp.pad(b.astype(f32), ((0, 0), (0, 0), (0, padded - k)))
    zero = jnp.zeros((1, padded, n), f32)
    bt = jnp.concatenate([zero, jnp.swapaxes(bf, 1, 2), zero])  # (G + 2, K, N)
    bs = jnp.repeat(b_scale, BLOCK, axis=1)[:, :n] if params.b_tiles else b_scale
    no_scale = jnp.zeros((1, n, kb), f32)
    bs = jnp.concatenate([no_scale, bs, no_scale])  # (G + 2, N, kb)
    out = jnp.zeros((m, n), f32)
    for j in range(kb):
        block = slice(j * BLOCK, (j + 1) * BLOCK)
        partial = jax.lax.ragged_dot(af[:, block], bt[:, block, :], ext,
                                     precision=jax.lax.Precision.HIGHEST,
                                     preferred_element_type=f32)
        scale = a_scale[:, j:j + 1] * bs[:, :, j][gid]
        out = out + scale * partial
    return (jnp.where(inside, out, 0.0).astype(params.out_dtype),)


def _reference(params, a, a_scale, b, b_scale, group_sizes, first_row):
    if params.n_batch == 0:
        return _reference_one(params, a, a_scale, b, b_scale, group_sizes, first_row)
    args = (a, a_scale, b, b_scale, group_sizes)
    return map_examples(lambda *x: _reference_one(params, *x, first_row), params.n_batch,
                        args, _abstract_eval(params, *args))


def _batch(params, args, dims):
    _, moved = batch_first(args, dims)
    batched = dataclasses.replace(params, impl="reference", n_batch=params.n_batch + 1)
    return batched, moved, (0,)


def _sharding_rule(params, mesh, value_types, result_types):
    del mesh, value_types, result_types
    lead = [f"l{i}" for i in range(params.n_batch)]
    b_rows = "nb" if params.b_tiles else "n"

    def dims(*names):
        return " ".join(lead + list(names))

    return (f"{dims('m', 'k')}, {dims('m', 'kb')}, {dims('g', 'n', 'k')}, "
            f"{dims('g', b_rows, 'kb')}, {dims('g')} -> {dims('m', 'n')}")


def _first_row_zero():
    return jnp.zeros((1,), jnp.int32)


def _partition(params, mesh, arg_infos, result_infos):
    del result_infos
    a_info, _, b_info, _, _ = arg_infos
    if params.n_batch or b_info.shape[0] == 0:
        specs = tuple(PartitionSpec(*([None] * len(i.shape))) for i in arg_infos)
        out = PartitionSpec(*([None] * (len(a_info.shape))))

        def local_whole(bind_inner, *args):
            return bind_inner(*args, _first_row_zero(), params=params)

        return local_whole, (out,), specs

    def spec_of(info, blocked):
        spec = _sharding.padded_spec(info.sharding, len(info.shape))
        spec = _sharding.keep_divisible(mesh, info.shape, spec)
        return _sharding.keep_blocks_whole(mesh, info.shape, spec, blocked)

    # Whole scale blocks on every device, and N shards the kernel's 16-byte rows hold.
    sa = spec_of(a_info, {1: BLOCK})
    sb = spec_of(b_info, {1: BLOCK if params.b_tiles else 8, 2: BLOCK})
    take = _sharding.axes_taken_once()
    g = take(sb[0])  # experts first: the weights stay where they are
    n = take(sb[1])
    k = take(sa[1]) if sa[1] is not None and sa[1] == sb[2] else None
    m = take(sa[0])
    summed = _sharding.axes_of(k) + _sharding.axes_of(g)
    row_shards = _sharding.shard_count(mesh, m)
    # Partial sums over a split K (or disjoint rows) are added in float32, then rounded once.
    inner = dataclasses.replace(params, out_dtype="float32") if summed else params

    def local_fn(bind_inner, a, a_scale, b, b_scale, group_sizes):
        local_rows, local_groups = a.shape[0], b.shape[0]
        counts = clamped_counts(group_sizes, local_rows * row_shards)
        first_group = _axis_index(g) * local_groups
        first_row = _axis_index(m) * local_rows
        local, start = _local_counts(counts, first_group, local_groups, first_row, local_rows)
        (y,) = bind_inner(a, a_scale, b, b_scale, local, start, params=inner)
        if summed:
            y = jax.lax.psum(y, summed).astype(params.out_dtype)
        return (y,)

    arg_specs = (PartitionSpec(m, k), PartitionSpec(m, k), PartitionSpec(g, n, k),
                 PartitionSpec(g, n, k), PartitionSpec(None))
    return local_fn, (PartitionSpec(m, n),), arg_specs


def _unsharded(params, bind_inner, *args):
    return bind_inner(*args, _first_row_zero(), params=params)


grouped_fp8_block_gemm_op = Op(
    OpSpec(
        name="grouped_fp8_block_gemm",
        abstract_eval=_abstract_eval,
        inner_abstract_eval=_abstract_eval,
        reference=_reference,
        batch=_batch,
        sharding_rule=_sharding_rule,
        partition=_partition,
        unsharded=_unsharded,
        kernel_platforms=("cuda",),
        ffi_off_kernel_platforms="error",
    )
)


def _check(what: str, ok: bool, message: str, error=ValueError) -> None:
    if not ok:
        raise error(f"grouped_fp8_block_gemm: {what} {message}")


def grouped_fp8_block_gemm(a, a_scale, b, b_scale, group_sizes, *, out_dtype=jnp.bfloat16,
                           impl: str = "auto"):
    """`out (M, N)`: row m of group g is `a[m] @ b[g].T` with the FP8 block scales applied to
    every 128-long K block's float32 partial sum (the module docstring has the layouts).

    **Arguments:**

    - `a`: `(M, K)` `float8_e4m3fn` token rows, grouped by `group_sizes`.
    - `a_scale`: `(M, ceil(K/128))` float32 `scale_inv` of `a`'s 1x128 blocks.
    - `b`: `(G, N, K)` `float8_e4m3fn`, one weight per group.
    - `b_scale`: float32 `scale_inv` of `b`'s 128x128 tiles, `(G, ceil(N/128), ceil(K/128))`,
      or of its 1x128 blocks, `(G, N, ceil(K/128))`.
    - `group_sizes`: `(G,)` int32 rows per group, clamped (rows past the sum give 0 rows).
    - `out_dtype`: bfloat16 or float32.
    - `impl`: `"auto"` (the reference until the CUDA kernel has passed its GPU test),
      `"ffi"` (the CUDA kernel; an error elsewhere) or `"reference"` (pure JAX, any K and N).

    **Returns:** the `(M, N)` product in `out_dtype`.
    """
    a, a_scale, b, b_scale, group_sizes = (
        jnp.asarray(x) for x in (a, a_scale, b, b_scale, group_sizes))
    out_name = jnp.dtype(out_dtype).name
    _check("out_dtype", out_name in OUT_DTYPES, f"must be bfloat16 or float32, got {out_name}.")
    _check("impl", impl in IMPLS, f"must be one of {IMPLS}, got {impl!r}.")
    for name, x, rank in (("a", a, 2), ("b", b, 3)):
        _check(name, getattr(x, "dtype", None) == jnp.float8_e4m3fn,
               f"must be float8_e4m3fn, got {getattr(x, 'dtype', type(x).__name__)}. Quantize "
               "it with Float8BlockQuantizer (E4M3).", TypeError)
        _check(name, x.ndim == rank, f"must have rank {rank}, got shape {x.shape}.")
    m, k = a.shape
    groups, n, b_k = b.shape
    _check("b", b_k == k, f"must be (G, N, K) with a's K = {k}, got shape {b.shape}.")
    kb = -(-k // BLOCK)
    nb = -(-n // BLOCK)
    _check("a_scale", a_scale.dtype == jnp.float32 and a_scale.shape == (m, kb),
           f"must be float32 (M, ceil(K/128)) = {(m, kb)}, got {a_scale.dtype} "
           f"{a_scale.shape}.")
    b_tiles = b_scale.shape == (groups, nb, kb)
    _check("b_scale", b_scale.dtype == jnp.float32 and (b_tiles or
                                                        b_scale.shape == (groups, n, kb)),
           f"must be float32 (G, ceil(N/128), ceil(K/128)) = {(groups, nb, kb)} (128x128 "
           f"tiles) or (G, N, ceil(K/128)) = {(groups, n, kb)} (1x128 blocks), got "
           f"{b_scale.dtype} {b_scale.shape}.")
    _check("group_sizes", jnp.issubdtype(getattr(group_sizes, "dtype", None), jnp.integer),
           f"must be an integer array (int32), got {getattr(group_sizes, 'dtype', None)}.",
           TypeError)
    _check("group_sizes", group_sizes.shape == (groups,),
           f"must have shape (G,) = {(groups,)} (one size per weight of b), got "
           f"{group_sizes.shape}.")
    if impl != "reference":
        _check("K", k % 16 == 0,
               f"= a.shape[1] must be a multiple of 16 (the kernel's 16-byte TMA rows), got "
               f"{k}. Pad a, b and their scales along K with zeros to a multiple of 16, or "
               "pass impl='reference'.")
        align = 8 if out_name == "bfloat16" else 4
        _check("N", n % align == 0,
               f"= b.shape[1] must be a multiple of {align} for {out_name} out (16-byte rows "
               f"of the output), got {n}. Pad b's N with zero rows, or pass "
               "impl='reference'.")
    params = GroupedFp8BlockGemmParams(b_tiles=b_tiles, out_dtype=out_name, impl=impl)
    (out,) = grouped_fp8_block_gemm_op.bind(a, a_scale, b, b_scale,
                                            group_sizes.astype(jnp.int32), params=params)
    return out
