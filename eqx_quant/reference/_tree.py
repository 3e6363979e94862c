"""The canonical pairwise tree sum that makes dbias bit-reproducible under any sharding.

The sum of `n` float32 values along an axis is the binary tree that splits at `h = ceil(n/2)`:
`T(v[0:n]) = T(v[0:h]) + T(v[h:n])`, `T(v[0:1]) = v[0]`, `T(v[0:0]) = +0`. When a mesh splits
the axis into `P` equal shards (`P` a power of two), each shard holds one node of the tree, so
per-shard sums combined with the same tree give exactly the unsharded result.

Over several axes the sums nest, innermost axis first: `T_{axis 0}(T_{axis 1}(... x ...))`.
"""

import functools

import jax.numpy as jnp
from jax import lax
import numpy as np
from jaxtyping import Array, Float

from ._ieee import add


@functools.lru_cache(maxsize=256)
def _leaf_slots(n: int) -> tuple[int, np.ndarray]:
    """Power-of-two width and, for each slot, the source index (`n` = padding)."""
    depth = max(0, (n - 1).bit_length())
    width = 1 << depth
    slots = np.full(width, n, dtype=np.int32)

    def place(start: int, count: int, base: int, size: int) -> None:
        if count == 1:
            slots[base] = start
        elif count > 1:
            half = (count + 1) // 2
            place(start, half, base, size // 2)
            place(start + half, count - half, base + size // 2, size // 2)

    place(0, n, 0, width)
    return depth, slots


def tree_sum(v: Float[Array, "..."], axis: int) -> Float[Array, "..."]:
    """Canonical tree sum of a float32 array along one axis (the axis is removed).

    Padding slots hold `-0.0`, the exact identity of IEEE addition (`x + -0 == x` for every
    `x`, including `+0`), so the padded power-of-two tree computes the canonical tree bit for bit.
    """
    v = jnp.moveaxis(jnp.asarray(v, jnp.float32), axis, 0)
    n = v.shape[0]
    if n == 0:
        return jnp.zeros(v.shape[1:], jnp.float32)
    depth, slots = _leaf_slots(n)
    if depth > 0:
        padded = jnp.concatenate([v, jnp.full((1,) + v.shape[1:], -0.0, jnp.float32)])
        v = padded[slots]
    for _ in range(depth):
        v = v.reshape((v.shape[0] // 2, 2) + v.shape[1:])
        # The barrier keeps XLA from fusing levels together (which would duplicate every
        # subtree into its parent's kernel and blow up compile time exponentially).
        v = lax.optimization_barrier(add(v[:, 0], v[:, 1]))
    return v[0]


def nested_tree_sum(v: Float[Array, "..."], first: int, last: int) -> Float[Array, "..."]:
    """Tree sums over axes `first..last-1`, innermost (`last-1`) first; those axes are removed."""
    for axis in range(last - 1, first - 1, -1):
        v = tree_sum(v, axis)
    return v
