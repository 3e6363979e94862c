"""Varying manual axes (`shard_map` with `check_vma=True`): a custom VJP's cotangents must
carry the same varying-axes type as its primal inputs, which a cotangent built from zeros or
from unvarying values (an all-reduced amax) does not. Also the run-time check that works
inside and outside `shard_map` (`checked`)."""

import functools

import equinox as eqx
import jax
import numpy as np


def varying_axes(value) -> tuple[str, ...]:
    """The manual mesh axes `value` varies over (empty outside `shard_map`). JAX keeps them
    in the abstract value's `mat.varying` (older releases: `vma`)."""
    aval = jax.typeof(value)
    mat = getattr(aval, "mat", None)
    axes = getattr(mat, "varying", None) if mat is not None else None
    if axes is None:
        axes = getattr(aval, "vma", frozenset())
    return tuple(sorted(axes))


def vary_like(value, axes: tuple[str, ...]):
    """`value` typed as varying over `axes` as well (a no-op where it already does)."""
    missing = tuple(a for a in axes if a not in varying_axes(value))
    if not missing:
        return value
    return jax.lax.pcast(value, missing, to="varying")


def cotangent_for(ct, primal_axes: tuple[str, ...], *, reduce: str = "sum"):
    """`ct` as the cotangent of a primal varying over `primal_axes`: summed (`reduce="sum"`,
    a gradient: the transpose of using an invariant value on every device) or maxed
    (`reduce="max"`, an observed amax) over the axes only `ct` varies over, then typed as
    varying over `primal_axes`."""
    if ct is None:
        return None
    extra = tuple(a for a in varying_axes(ct) if a not in primal_axes)
    if extra:
        ct = jax.lax.psum(ct, extra) if reduce == "sum" else jax.lax.pmax(ct, extra)
    return vary_like(ct, primal_axes)


def union_axes(*values) -> tuple[str, ...]:
    """The manual axes any leaf of `values` varies over."""
    return tuple(sorted({a for v in jax.tree.leaves(values) for a in varying_axes(v)}))


def _raise_if(bad, message: str) -> None:
    if np.any(bad):
        raise ValueError(message)


def checked(value, bad, message: str):
    """`value` with a run-time error attached that fires when `bad` is true."""
    if varying_axes(bad):
        # Inside shard_map with per-device values, eqx.error_if's cond cannot type-check
        # (its error branch is not device-varying); a host callback raises the same error.
        jax.debug.callback(functools.partial(_raise_if, message=message), bad)
        return value
    return eqx.error_if(value, bad, message)
