"""The canonical pairwise tree sum that makes dbias bit-reproducible under any sharding.

The sum of `n` float32 values along an axis is the binary tree that splits at `h = ceil(n/2)`:
`T(v[0:n]) = T(v[0:h]) + T(v[h:n])`, `T(v[0:1]) = v[0]`, `T(v[0:0]) = +0`. When `2^d` divides `n`,
the nodes at depth `d` are the equal chunks `[i*n/2^d, (i+1)*n/2^d)`. When a mesh splits the axis
into `P` equal
shards (`P` a power of two), each shard holds one node of the tree, so per-shard sums combined
with the same tree give exactly the unsharded result. Kernels use the same property to split
the work: they return the `P` node sums of depth `log2(P)` and the top levels are finished here.

Over several axes the sums nest, innermost axis first: `T_{axis 0}(T_{axis 1}(... x ...))`.
All additions are IEEE float32 (`ieee.add`), subnormals included.
"""

import functools

import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float

from .ieee import add


def node_bounds(n: int, split: int) -> list[tuple[int, int]]:
    """`[begin, end)` of the `split` nodes at depth log2(split) of the tree over `n` values.

    `split` must be a power of two that divides `n` (then the nodes are equal chunks; with a
    remainder the tree's nodes are not `ceil(p*n/split)`-aligned, e.g. n=27, split=8).
    """
    if n % split or split & (split - 1):
        raise ValueError(f"node_bounds: split={split} must be a power of two dividing n={n}.")
    return [(-(-p * n // split), -(-(p + 1) * n // split)) for p in range(split)]


@functools.lru_cache(maxsize=256)
def _node_slots(n: int, split: int) -> tuple[int, np.ndarray]:
    """Power-of-two width per node and, per node and slot, the source index (`n` = padding)."""
    bounds = node_bounds(n, split)
    largest = max(end - begin for begin, end in bounds)
    depth = max(0, (largest - 1).bit_length())
    width = 1 << depth
    slots = np.full((split, width), n, dtype=np.int32)

    def place(row: int, start: int, count: int, base: int, size: int) -> None:
        if count == 1:
            slots[row, base] = start
        elif count > 1:
            half = (count + 1) // 2
            place(row, start, half, base, size // 2)
            place(row, start + half, count - half, base + size // 2, size // 2)

    for row, (begin, end) in enumerate(bounds):
        place(row, begin, end - begin, 0, width)
    return depth, slots


def _pairwise_levels(v: Array, depth: int) -> Array:
    """Sum adjacent pairs along axis 1 of `(split, 2^depth, ...)`, `depth` times."""
    for _ in range(depth):
        v = v.reshape((v.shape[0], v.shape[1] // 2, 2) + v.shape[2:])
        # The barrier keeps XLA from fusing levels together (which would duplicate every
        # subtree into its parent's kernel and blow up compile time exponentially).
        v = lax.optimization_barrier(add(v[:, :, 0], v[:, :, 1]))
    return v[:, 0]


def split_tree_sum(v: Float[Array, "..."], axis: int, split: int) -> Float[Array, "..."]:
    """The `split` node sums at depth log2(split) of the canonical tree along `axis`.

    The axis is replaced by one of length `split`. Padding slots hold `-0.0`, the exact identity
    of IEEE addition (`x + -0 == x` for every `x`, including `+0`), so the padded power-of-two
    trees compute the canonical trees bit for bit.
    """
    v = jnp.moveaxis(jnp.asarray(v, jnp.float32), axis, 0)
    n = v.shape[0]
    if n == 0:
        out = jnp.zeros((split,) + v.shape[1:], jnp.float32)
        return jnp.moveaxis(out, 0, axis)
    depth, slots = _node_slots(n, split)
    if n == slots.size:  # every node is a full power-of-two tree: no padding, no gather
        v = v.reshape((split, n // split) + v.shape[1:])
    else:
        padded = jnp.concatenate([v, jnp.full((1,) + v.shape[1:], -0.0, jnp.float32)])
        v = padded[slots]  # (split, width, ...)
    return jnp.moveaxis(_pairwise_levels(v, depth), 0, axis)


def tree_sum(v: Float[Array, "..."], axis: int) -> Float[Array, "..."]:
    """Canonical tree sum of a float32 array along one axis (the axis is removed)."""
    return jnp.squeeze(split_tree_sum(v, axis, 1), axis)


def tree_sum_by_slices(v: Float[Array, "..."], axis: int) -> Float[Array, "..."]:
    """`tree_sum` built from slices only (no index constants), for contexts that forbid
    captured constants (`custom_partitioning` bodies). Graph size grows with the length."""
    v = jnp.moveaxis(jnp.asarray(v, jnp.float32), axis, 0)
    n = v.shape[0]
    if n == 0:
        return jnp.zeros(v.shape[1:], jnp.float32)
    if n & (n - 1) == 0:
        return _pairwise_levels(v.reshape((1,) + v.shape), n.bit_length() - 1)[0]

    def node(begin: int, count: int) -> Array:
        if count == 1:
            return v[begin]
        half = (count + 1) // 2
        # A barrier per node, as in `_pairwise_levels`: fused together, the emulated adds
        # duplicate every subtree into its parent (a 17-long axis compiled for minutes).
        return lax.optimization_barrier(
            add(node(begin, half), node(begin + half, count - half))
        )

    return node(0, n)


def nested_tree_sum(v: Float[Array, "..."], first: int, last: int) -> Float[Array, "..."]:
    """Tree sums over axes `first..last-1`, innermost (`last-1`) first; those axes are removed."""
    for axis in range(last - 1, first - 1, -1):
        v = tree_sum(v, axis)
    return v
