"""Explicit mesh axes (`jax.make_mesh`'s default, used with `jax.set_mesh`): there every
value's type carries its sharding, and reshapes of sharded dims need an `out_sharding`.
These helpers let the block arithmetic run as under Auto axes and give results their type."""

from collections.abc import Callable

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec


def explicit_sharding(value) -> jax.sharding.NamedSharding | None:
    """The sharding in `value`'s type if its mesh has Explicit axes, else None."""
    sharding = getattr(jax.typeof(value), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or AxisType.Explicit not in tuple(mesh.axis_types):
        return None
    return sharding


def with_auto_axes(fn: Callable, like, out_spec: PartitionSpec | None = None) -> Callable:
    """`fn` run with the Explicit axes of `like`'s mesh treated as Auto (XLA places the
    intermediate values), its result typed with `out_spec` on that mesh (default: `like`'s
    sharding). `fn` itself when `like` has no Explicit axes."""
    sharding = explicit_sharding(like)
    if sharding is not None and out_spec is not None:
        sharding = NamedSharding(sharding.mesh, out_spec)
    return with_auto_axes_to(fn, sharding)


def with_auto_axes_to(fn: Callable, sharding: NamedSharding | None) -> Callable:
    """`fn` run with the Explicit axes of `sharding`'s mesh treated as Auto, its result typed
    with `sharding`; `fn` itself when `sharding` is None (no Explicit axes)."""
    if sharding is None:
        return fn
    mesh = sharding.mesh
    axes = tuple(a for a, t in zip(mesh.axis_names, mesh.axis_types) if t == AxisType.Explicit)
    return jax.sharding.auto_axes(fn, axes=axes, out_sharding=sharding)
