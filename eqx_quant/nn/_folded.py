"""`jax.vmap` over a layer's examples folds them into the GEMM rows.

A layer called on a batch `(*batch, in)` and the same layer under `jax.vmap` must compute the
same thing: one scale per tensor over the whole batch (as TE does), one GEMM, one observed
amax. A plain `vmap` of a quantizing function would instead quantize each example with its
own scale and sum the examples' state cotangents. So the layer's forward and backward
functions are `custom_vmap`s whose rule, when only the activations (and their gradient) are
batched, calls the function once on the batched arrays: the mapped axis simply becomes one
more leading batch dim. When the weights are batched too (a stack of layers), each layer is
its own computation and the rule maps the function as `jax.vmap` would.

`custom_vjp` wraps the `custom_vmap`s (JAX's documented order), so that `jax.grad` never
differentiates a `custom_vmap`.
"""

from collections.abc import Callable, Sequence

import jax
from jax.custom_batching import custom_vmap


def folded(impl: Callable, folds: Sequence[int], batched_outputs: Callable) -> Callable:
    """`impl` as a `custom_vmap`: when exactly the arguments at positions `folds` are mapped
    (at axis 0), call `impl` on them as they are; `batched_outputs(out)` marks which outputs
    then carry the mapped axis. Any other mapping maps `impl` as `jax.vmap` would."""
    f = custom_vmap(impl)

    @f.def_vmap
    def rule(axis_size, in_batched, *args):
        del axis_size
        mapped = [any(jax.tree.leaves(b)) for b in in_batched]
        if all(m == (i in folds) for i, m in enumerate(mapped)):
            # `f`, not `impl`: an enclosing vmap (e.g. over the batch, around one over the
            # sequence) reaches this rule again and folds its axis too.
            out = f(*args)
            return out, batched_outputs(out)
        in_axes = tuple(jax.tree.map(lambda b: 0 if b else None, b) for b in in_batched)
        out = jax.vmap(impl, in_axes=in_axes)(*args)
        return out, jax.tree.map(lambda _: True, out)

    return f
