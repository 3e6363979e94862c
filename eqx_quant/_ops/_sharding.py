"""Helpers for partition callbacks: normalised partition specs and Shardy rule strings."""

import math

from jax.sharding import PartitionSpec


def axes_of(entry) -> tuple[str, ...]:
    """Mesh axis names of one PartitionSpec entry (None, a name, or a tuple of names)."""
    if entry is None:
        return ()
    if isinstance(entry, str):
        return (entry,)
    return tuple(entry)


def padded_spec(sharding, ndim: int) -> list:
    """The sharding's spec as a list with exactly `ndim` entries (None where unsharded)."""
    spec = list(getattr(sharding, "spec", PartitionSpec()))
    spec = spec + [None] * (ndim - len(spec))
    return [None if not axes_of(e) else e for e in spec[:ndim]]


def shard_count(mesh, entry) -> int:
    return math.prod(mesh.shape[a] for a in axes_of(entry))


def keep_divisible(mesh, shape, spec: list) -> list:
    """Unshard dims whose size the mesh does not divide (padded shards would corrupt amax)."""
    return [e if e is None or shape[d] % shard_count(mesh, e) == 0 else None for d, e in enumerate(spec)]


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def factors(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]
