"""The two ragged products of an MoE layer, usable under any number of `jax.vmap`s: XLA's
`ragged_dot` (`rows_times_groups`, `outer_per_group`: any dtype and precision, the float32
gradients) and the grouped GEMM op (`grouped_rows`, `grouped_outer`: FP8 and bfloat16
operands, CUTLASS on CUDA).

`jax.lax.ragged_dot` batches only when all its operands are batched, and only once. These
fold a batch of B problems into one problem instead: problem b's rows follow problem b-1's,
and each problem gets one more group, its rows past its last group, multiplied by zeros (or
dropped), so every row keeps its own group. The folded call is again one of these
functions, so a second `vmap` folds again.
"""

import functools

import jax
import jax.numpy as jnp
from jax.lax import RaggedDotDimensionNumbers

from .._core import explicit_sharding, with_auto_axes_to
from .._ops import GroupedGemmParams, grouped_gemm_op
from .._ops.grouped_gemm import kernel_choice
from ..reference import grouped


def _spec_entry(value, dim: int):
    sharding = explicit_sharding(value)
    if sharding is None:
        return None
    spec = tuple(sharding.spec) + (None,) * (value.ndim - len(sharding.spec))
    return spec[dim]


def _explicit_out(entries, *values):
    """On Explicit axes: the sharding `P(*entries)` on the operands' mesh (an axis named by
    two entries is dropped from the later one), to run the product with those axes as Auto
    (XLA has no Explicit sharding rule for ragged dots). None off Explicit axes."""
    shardings = [explicit_sharding(v) for v in values]
    mesh = next((s.mesh for s in shardings if s is not None), None)
    if mesh is None:
        return None
    used, out = set(), []
    for e in entries:
        names = () if e is None else (e if isinstance(e, tuple) else (e,))
        if any(n in used for n in names):
            e = None
        else:
            used.update(names)
        out.append(e)
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*out))


def group_counts(group_sizes, rows: int):
    """Each group's row count, clamped as grouped_quantize clamps (the sum never passes rows)."""
    return grouped.group_bounds(group_sizes, 1, rows)[1]


def row_group(group_sizes, rows: int):
    """The group of every row; G for rows past the last group."""
    starts, counts = grouped.group_bounds(group_sizes, 1, rows)
    return grouped.row_groups(starts, counts, rows)


def _broadcast(x, batched: bool, size: int):
    return x if batched else jnp.broadcast_to(x, (size,) + x.shape)


def _with_tail_group(counts, rows: int):
    """(B, G) counts -> (B * (G + 1),): each problem's rows past its last group, appended."""
    tail = rows - jnp.sum(counts, axis=1, keepdims=True)
    return jnp.concatenate([counts, tail], axis=1).reshape(-1)


@functools.cache
def rows_times_groups(precision):
    """`f(a (M, K), b (G, K, N), counts (G,)) -> (M, N)` float32: row m of group g is
    `a[m] @ b[g]`; rows past the last group are 0. `counts` must sum to at most M."""

    @jax.custom_batching.custom_vmap
    def product(a, b, counts):
        def ragged(a, b, counts):
            return jax.lax.ragged_dot(
                a, b, counts, precision=precision, preferred_element_type=jnp.float32
            )

        out = _explicit_out((_spec_entry(a, 0), _spec_entry(b, 2)), a, b, counts)
        return with_auto_axes_to(ragged, out)(a, b, counts)

    @product.def_vmap
    def _fold(size, in_batched, a, b, counts):
        a, b, counts = (_broadcast(v, f, size) for v, f in zip((a, b, counts), in_batched))
        _, m, k = a.shape
        zeros = jnp.zeros((size, 1) + b.shape[2:], b.dtype)
        b = jnp.concatenate([b, zeros], axis=1).reshape((-1,) + b.shape[2:])
        y = product(a.reshape(size * m, k), b, _with_tail_group(counts, m))
        return y.reshape(size, m, -1), True

    return product


@functools.cache
def outer_per_group(precision):
    """`f(a (M, K), c (M, N), counts (G,)) -> (G, K, N)` float32: `a_g.T @ c_g` over the rows
    of group g (0 for an empty group). `counts` must sum to at most M."""
    dims = RaggedDotDimensionNumbers(
        dot_dimension_numbers=(([0], [0]), ([], [])),
        lhs_ragged_dimensions=[0],
        rhs_group_dimensions=[],
    )

    @jax.custom_batching.custom_vmap
    def product(a, c, counts):
        def ragged(a, c, counts):
            return jax.lax.ragged_dot_general(
                a, c, counts, dims, precision=precision, preferred_element_type=jnp.float32
            )

        out = _explicit_out((None, _spec_entry(a, 1), _spec_entry(c, 1)), a, c, counts)
        return with_auto_axes_to(ragged, out)(a, c, counts)

    @product.def_vmap
    def _fold(size, in_batched, a, c, counts):
        a, c, counts = (_broadcast(v, f, size) for v, f in zip((a, c, counts), in_batched))
        _, m, k = a.shape
        groups = counts.shape[1]
        out = product(
            a.reshape(size * m, k), c.reshape(size * m, -1), _with_tail_group(counts, m)
        )
        return out.reshape((size, groups + 1) + out.shape[1:])[:, :groups], True

    return product


def kernel_fits(dims: tuple[int, ...], *operands) -> bool:
    """Whether the grouped GEMM op takes these K and N (rows of a multiple of 16 bytes for
    every element type; docs/gemm.md) and operands. Other shapes, and operands typed with
    Explicit mesh axes (the op's partition does not run there yet), take XLA's ragged dot
    above."""
    if any(explicit_sharding(x) is not None for x in operands):
        return False
    return all(d > 0 and d % 16 == 0 for d in dims)


def _kernel_out(out_dtype: str) -> str:
    """The op writes bfloat16 or float32; float16 is cast from float32."""
    return out_dtype if out_dtype in ("bfloat16", "float32") else "float32"


def _no_alpha(batch: tuple[int, ...] = ()):
    return jnp.zeros(batch + (0,), jnp.float32)


def _with_tail_alpha(alpha, size: int):
    """(B, G) factors -> (B * (G + 1),), 0 for each problem's tail group; (B, 0) -> (0,)."""
    if alpha.shape[-1] == 0:
        return _no_alpha()
    zeros = jnp.zeros((size, 1), alpha.dtype)
    return jnp.concatenate([alpha, zeros], axis=1).reshape(-1)


@functools.cache
def _kernel_rows(transposed: bool, out_dtype: str):
    """`f(a (M, K), b (G, K, N) or (G, N, K), counts (G,), alpha (G,) or (0,)) -> (M, N)` in
    `out_dtype`, through the grouped GEMM op; folds vmapped problems as above."""

    @jax.custom_batching.custom_vmap
    def product(a, b, counts, alpha):
        n = b.shape[1] if transposed else b.shape[2]
        fp8 = jnp.dtype(a.dtype).itemsize == 1 and jnp.dtype(b.dtype).itemsize == 1
        tile, fast = kernel_choice(a.shape[0], b.shape[0], fp8)
        params = GroupedGemmParams("rows", transposed, a.shape[0], a.shape[1], n, out_dtype,
                                   tile, fast)

        # Explicit axes type the result through the op's partition rule.
        return grouped_gemm_op.bind(a, b, counts.astype(jnp.int32), alpha, params=params)[0]

    @product.def_vmap
    def _fold(size, in_batched, a, b, counts, alpha):
        a, b, counts, alpha = (
            _broadcast(v, f, size) for v, f in zip((a, b, counts, alpha), in_batched)
        )
        _, m, k = a.shape
        zeros = jnp.zeros((size, 1) + b.shape[2:], b.dtype)
        b = jnp.concatenate([b, zeros], axis=1).reshape((-1,) + b.shape[2:])
        y = product(
            a.reshape(size * m, k), b, _with_tail_group(counts, m), _with_tail_alpha(alpha, size)
        )
        return y.reshape(size, m, -1), True

    return product


def grouped_rows(a, b, counts, alpha=None, *, transposed: bool, out_dtype: str):
    """Row m of group g times `alpha[g] * b[g]` (b `(G, K, N)`, or `(G, N, K)` with
    `transposed`), rows past the last group 0, in `out_dtype`: the grouped GEMM op (CUTLASS
    on CUDA). FP8 operands need `transposed` there (both K-contiguous)."""
    alpha = _no_alpha() if alpha is None else alpha.astype(jnp.float32)
    y = _kernel_rows(transposed, _kernel_out(out_dtype))(a, b, counts, alpha)
    return y.astype(out_dtype)


@functools.cache
def _kernel_outer(transposed: bool, k: int, n: int, out_dtype: str):
    """`f(a, c, counts (G,), alpha (G,) or (0,)) -> (G, K, N)`: `a (M, K)` and `c (M, N)`, or
    with `transposed` their flat per-group transposed copies; folds vmapped problems."""

    @jax.custom_batching.custom_vmap
    def product(a, c, counts, alpha):
        m = a.shape[0] // k if transposed else a.shape[0]
        params = GroupedGemmParams("wgrad", transposed, m, k, n, out_dtype)

        return grouped_gemm_op.bind(a, c, counts.astype(jnp.int32), alpha, params=params)[0]

    @product.def_vmap
    def _fold(size, in_batched, a, c, counts, alpha):
        a, c, counts, alpha = (
            _broadcast(v, f, size) for v, f in zip((a, c, counts, alpha), in_batched)
        )
        m = a.shape[1] // k if transposed else a.shape[1]
        groups = counts.shape[1]
        flat = (-1,) if transposed else (size * m, -1)
        out = product(
            a.reshape(flat), c.reshape(flat), _with_tail_group(counts, m),
            _with_tail_alpha(alpha, size),
        )
        return out.reshape((size, groups + 1) + out.shape[1:])[:, :groups], True

    return product


def grouped_outer(a, c, counts, alpha=None, *, transposed: bool, k: int, n: int,
                  out_dtype: str):
    """`alpha[g] * a_g.T @ c_g` for every group, `(G, K, N)` in `out_dtype` (0 for an empty
    group): the grouped GEMM op (CUTLASS on CUDA). `a (M, K)` and `c (M, N)`, or with
    `transposed` the flat per-group transposed copies (FP8 needs those on CUDA)."""
    alpha = _no_alpha() if alpha is None else alpha.astype(jnp.float32)
    out = _kernel_outer(transposed, k, n, _kernel_out(out_dtype))(a, c, counts, alpha)
    return out.astype(out_dtype)
