"""`stats`: per layer and per GEMM operand, what quantizing did to the values."""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from ._layer import AbstractQuantizedLayer
from ._train import with_receivers

_ROLES = ("x", "kernel", "grad")
_FIELDS = ("scale", "amax", "saturated", "flushed")


def _one(v, t) -> jax.Array:
    """`[scale, amax, saturated, flushed]` of operand v (any rank, as quantized) and its
    quantized tensor t. The scale is NaN where t has more than one (block formats; a block
    format's tensor of one block reports that block's)."""
    part = t.rowwise if t.rowwise is not None else t.colwise
    v = v.astype(jnp.float32)
    deq = part.dequantize().astype(jnp.float32).reshape(v.shape)
    payload = part.data.astype(jnp.float32).reshape(v.shape)
    top = float(jnp.finfo(part.data.dtype).max)
    # Saturated: stored at the format's largest magnitude while |v| was larger still.
    saturated = (jnp.abs(payload) == top) & (jnp.abs(v) > jnp.abs(deq))
    # Flushed: a non-zero value stored as zero.
    flushed = (v != 0) & (deq == 0)
    count = max(v.size, 1)
    nonzero = jnp.maximum(jnp.sum(v != 0, dtype=jnp.float32), 1.0)
    scale_inv = part.scale_inv
    scale = (1.0 / scale_inv.astype(jnp.float32).reshape(())) if scale_inv.size == 1 else jnp.nan
    return jnp.stack([
        jnp.asarray(scale, jnp.float32),
        jnp.max(jnp.abs(v)) if v.size else jnp.float32(0),
        jnp.sum(saturated, dtype=jnp.float32) / count,
        jnp.sum(flushed, dtype=jnp.float32) / nonzero,
    ])


def operand_stats(pairs) -> jax.Array:
    """The `(3, 4)` probe cotangent of one layer call: pairs (operand, quantized) for x, the
    kernel and the output gradient."""
    return jnp.stack([_one(v, t) for v, t in pairs])


def _is_layer(x) -> bool:
    return isinstance(x, AbstractQuantizedLayer)


def stats(fn: Callable, model, *args, **kwargs) -> dict[str, dict[str, dict[str, jax.Array]]]:
    """Run one forward and backward pass of `fn(model, *args, **kwargs) -> loss` and report,
    for every quantized layer and each of its GEMM operands, what quantizing did:

    `{layer_path: {"x" | "kernel" | "grad": {"scale", "amax", "saturated", "flushed"}}}`

    - `scale`: the per-tensor scale used (NaN for block formats, which have one per block);
    - `amax`: the operand's amax in this pass;
    - `saturated`: the fraction of its values clamped to the format's largest magnitude;
    - `flushed`: the fraction of its non-zero values stored as zero.

    `layer_path` is `jax.tree_util.keystr` of the layer's place in the model. Costs one extra
    training step's compute (no state changes; the model is not modified), so call it every
    N steps. Layers `fn` calls more than once report the sum over the calls; layers without a
    recipe, and `GroupedLinear` layers (whose state, if any, holds the amaxes), are left out.
    """
    def add_probe(x):
        if _is_layer(x) and x.recipe is not None and x.reports_stats:
            return eqx.tree_at(lambda m: m.probe, x, jnp.zeros((3, 4), jnp.float32),
                               is_leaf=lambda v: v is None)
        return x

    # Delayed-scaling layers also get their receivers, as in a training step.
    probed = jax.tree.map(add_probe, with_receivers(model), is_leaf=_is_layer)

    def is_probe_path(path, _):
        return bool(path) and getattr(path[-1], "name", None) == "probe"

    mask = jax.tree_util.tree_map_with_path(
        lambda path, leaf: is_probe_path(path, leaf) and eqx.is_inexact_array(leaf), probed
    )
    diff, static = eqx.partition(probed, mask)

    def inner(d):
        return fn(eqx.combine(d, static), *args, **kwargs)

    grads = jax.grad(inner)(diff)
    report = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(grads):
        if leaf is None:
            continue
        layer_path = jax.tree_util.keystr(path[:-1])
        report[layer_path] = {
            role: {f: leaf[i, j] for j, f in enumerate(_FIELDS)} for i, role in enumerate(_ROLES)
        }
    return report
