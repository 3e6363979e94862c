"""Helpers for partition callbacks: normalised partition specs and Shardy rule strings."""

import math

import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec


def axes_of(entry) -> tuple[str, ...]:
    """Mesh axis names of one PartitionSpec entry (None, a name, or a tuple of names)."""
    if entry is None:
        return ()
    if isinstance(entry, str):
        return (entry,)
    return tuple(entry)


def pmax_amax(amax, axes):
    """`lax.pmax` of non-negative float32 amaxes over the mesh `axes`, exact: taken on their bit
    patterns, which order like the values; `amax` itself when `axes` is empty. (A float pmax
    on XLA's CPU devices flushes a subnormal amax to zero, so a sharded call would differ
    from the unsharded one.)"""
    axes = tuple(axes)
    if not axes:
        return amax
    key = lax.pmax(lax.bitcast_convert_type(amax, jnp.uint32), axes)
    return lax.bitcast_convert_type(key, jnp.float32)


def padded_spec(sharding, ndim: int) -> list:
    """The sharding's spec as a list with exactly `ndim` entries (None where unsharded)."""
    spec = list(getattr(sharding, "spec", PartitionSpec()))
    spec = spec + [None] * (ndim - len(spec))
    return [None if not axes_of(e) else e for e in spec[:ndim]]


def shard_count(mesh, entry) -> int:
    return math.prod(mesh.shape[a] for a in axes_of(entry))


def keep_divisible(mesh, shape, spec: list) -> list:
    """Unshard dims whose size the mesh does not divide (padded shards would corrupt amax)."""
    return [
        e if e is None or shape[d] % shard_count(mesh, e) == 0 else None
        for d, e in enumerate(spec)
    ]


def axes_taken_once():
    """`take(entry)`: the spec entry the first time its mesh axes are asked for, None when it
    is None or shares an axis with an entry taken before (a mesh axis splits one dim)."""
    used: set[str] = set()

    def take(entry):
        names = axes_of(entry)
        if not names or used & set(names):
            return None
        used.update(names)
        return entry

    return take


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def factors(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def keep_blocks_whole(mesh, shape, spec: list, blocked: dict[int, int]) -> list:
    """Unshard each dim `d` of `blocked` ({dim: block}) whose shards would not hold whole
    blocks (a block split over two devices could not get one scale)."""
    out = list(spec)
    for d, block in blocked.items():
        if out[d] is not None and (shape[d] // shard_count(mesh, out[d])) % block:
            out[d] = None
    return out


class BlockRule:
    """Shardy rule of a block-scaled op: x's per-example dims that are split into blocks are
    compound factors `(q k)` (blocks x block size), their scale dims the factor `q`, so the
    propagation can only shard whole blocks. A dim is compound only when its block count is a
    multiple of the device count: otherwise Shardy could split a mesh axis into sub-axes
    (which the partition callback cannot express). Other dims stay plain; the partition then
    keeps any dim whose shards would split a block unsharded."""

    def __init__(self, n_batch: int, shape: tuple[int, ...], blocked: dict[int, int], mesh):
        self.batch = factors("b", n_batch)
        self.x: list[str] = []
        self.scale: list[str] = []
        self.sizes: dict[str, int] = {}
        self._dummies = 0
        rank = len(shape)
        blocked = {d % rank: b for d, b in blocked.items()} if rank else {}
        # Inside a shard_map whose other axes stay automatic the mesh may report no devices.
        devices = mesh.size or 1
        for d, size in enumerate(shape):
            block = blocked.get(d)
            if block and size > block and size % block == 0 and (size // block) % devices == 0:
                self.x.append(f"(q{d} k{d})")
                self.scale.append(f"q{d}")
                self.sizes[f"q{d}"] = size // block
                self.sizes[f"k{d}"] = block
            else:
                self.x.append(f"s{d}")
                self.scale.append(f"t{d}")

    def scale_dims(self, d: int) -> list[str]:
        """x's factors with dim `d` replaced by its scale factor (per-example dims)."""
        return self.x[:d] + [self.scale[d]] + self.x[d + 1 :]

    def dummy(self) -> list[str]:
        self._dummies += 1
        return [f"z{self._dummies}"]

    def unrelated(self, n: int) -> list[str]:
        out = []
        for _ in range(n):
            self._dummies += 1
            out.append(f"u{self._dummies}")
        return out

    def render(self, operands: list[list[str]], results: list[list[str]]):
        """The `(rule, factor sizes)` pair that custom_partitioning accepts."""

        def join(groups):
            return ", ".join(" ".join(g) for g in groups)

        # Shardy wants sizes only for factors that never stand for a whole dimension.
        whole = {f for g in operands + results for f in g if not f.startswith("(")}
        sizes = {f: n for f, n in self.sizes.items() if f not in whole}
        return f"{join(operands)} -> {join(results)}", sizes
