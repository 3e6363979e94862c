"""The two ragged products of an MoE layer, usable under any number of `jax.vmap`s.

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
