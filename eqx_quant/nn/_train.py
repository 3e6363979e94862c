"""The training step: parameter gradients and the next delayed-scaling state, kept apart.

Parameters are the model's inexact (floating) arrays: what `eqx.filter(model,
eqx.is_inexact_array)` selects and what optax should see. The delayed-scaling state is stored
as uint32 bits (`_state`), so it is never among them. `value_and_grad` gives each state a
receiver for one gradient computation and reads from its cotangent the amax every call
observed, and how many calls there were:

- 0 calls (the loss did not reach the layer, or `stop_gradient` cut it off): the state stays;
- 1 call: the state advances with that amax (TE's update rule);
- more (one layer called twice per step, or summed over a `vmap` the layer could not fold):
  the cotangents were summed, so the amax is lost; that is an error, never a wrong scale.

`accumulate` runs the same over microbatches and combines their amaxes with a max, so one
update follows the whole step.
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from ._layer import AbstractQuantizedLayer
from ._state import DelayedState, ScalingState

_ROLES = ("x", "kernel", "grad")

MSG_CALLED_TWICE = (
    "eqx_quant.nn: a layer with DelayedScaling was called more than once in one gradient "
    "computation (the same layer used twice, or mapped by jax.vmap over something other than "
    "its inputs), so the amaxes it observed were summed, not maxed. Call each such layer once "
    "per step (concatenate its inputs), give each use its own layer, or use CurrentScaling "
    "for it."
)


def _is_layer(x) -> bool:
    return isinstance(x, AbstractQuantizedLayer)


def _is_state(x) -> bool:
    return isinstance(x, DelayedState)


def partition(model) -> tuple[Any, Any]:
    """`(params, rest)`: the trainable arrays (what to give optax) and everything else (the
    delayed-scaling state and the static parts); `eqx.combine(params, rest)` is the model."""
    return eqx.partition(model, eqx.is_inexact_array)


def with_receivers(model):
    return jax.tree.map(lambda s: s.with_receiver() if _is_state(s) else s, model,
                        is_leaf=_is_state)


def _without_receivers(tree):
    return jax.tree.map(lambda s: s.without_receiver() if _is_state(s) else s, tree,
                        is_leaf=_is_state)


def _observe(fn: Callable, has_aux: bool):
    """fn(model, ...) -> (value, parameter gradients, observations)."""

    def run(model, *args, **kwargs):
        diff, static = eqx.partition(with_receivers(model), eqx.is_inexact_array)

        def inner(d):
            return fn(eqx.combine(d, static), *args, **kwargs)

        value, grads = jax.value_and_grad(inner, has_aux=has_aux)(diff)
        observed = jax.tree.map(
            lambda s: s.observed if _is_state(s) else None, grads, is_leaf=_is_state
        )
        return value, _without_receivers(grads), observed

    return run


def _advance(model, observed):
    """The model with each layer's state advanced by what it observed: the layers that share a
    recipe advance together (`AbstractRecipe.advance_all`), one batched update per recipe."""
    observed = _checked(observed)
    leaves, treedef = jax.tree.flatten(model, is_leaf=_is_layer)
    obs_leaves = treedef.flatten_up_to(observed)
    by_recipe: dict[Any, list[int]] = {}
    for i, leaf in enumerate(leaves):
        if _is_layer(leaf) and leaf.state is not None:
            by_recipe.setdefault(leaf.recipe, []).append(i)
    for recipe, indices in by_recipe.items():
        obs = [
            ScalingState(*(getattr(obs_leaves[i].state, r) for r in _ROLES)) for i in indices
        ]
        new = recipe.advance_all([leaves[i].state for i in indices], obs)
        for i, state in zip(indices, new, strict=True):
            leaves[i] = eqx.tree_at(lambda m: m.state, leaves[i], state)
    return jax.tree.unflatten(treedef, leaves)


def _checked(observed):
    """`observed` with one run-time check for the whole model: no layer was called twice.
    One check, not one per layer: on a GPU each `eqx.error_if` is a conditional whose
    predicate the host reads, a device-to-host wait."""
    counts = [obs[..., 1] for obs in jax.tree.leaves(observed)]
    if not counts:
        return observed
    twice = jnp.any(jnp.stack([jnp.any(c > 1.5) for c in counts]))
    return eqx.error_if(observed, twice, MSG_CALLED_TWICE)


def value_and_grad(fn: Callable, *, has_aux: bool = False) -> Callable:
    """`fn(model, *args, **kwargs) -> loss` (or `(loss, aux)` with `has_aux`) becomes a
    function returning `(value, grads, model)`:

    - `value`: `loss` or `(loss, aux)`;
    - `grads`: the gradients of the model's parameters (its inexact arrays; None elsewhere),
      as `eqx.filter_value_and_grad` gives them: hand them to optax as they are;
    - `model`: the same model with every layer's delayed-scaling state advanced by the
      amaxes this step observed (parameters unchanged).

    ```python
    loss, grads, model = eqx_quant.nn.value_and_grad(loss_fn)(model, x, y)
    updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_inexact_array))
    model = eqx.apply_updates(model, updates)
    ```

    Works under `jax.jit` / `eqx.filter_jit`. A layer called more than once within `fn`
    (with DelayedScaling) raises at run time rather than advance with a wrong amax.
    """
    observe = _observe(fn, has_aux)

    def wrapped(model, *args, **kwargs):
        value, grads, observed = observe(model, *args, **kwargs)
        return value, grads, _advance(model, observed)

    return wrapped


def accumulate(fn: Callable, *, has_aux: bool = False) -> Callable:
    """`value_and_grad` over microbatches: every argument after the model carries a leading
    microbatch axis. Returns `(value, grads, model)` with the mean loss (and the stacked
    `aux`), the mean parameter gradients, and the state advanced once with the max of the
    microbatches' amaxes (as one step over the whole batch would record). The microbatches
    run in a `jax.lax.scan`, so memory is that of one microbatch.
    """
    observe = _observe(fn, has_aux)

    def wrapped(model, *batches):
        if not batches:
            raise ValueError(
                "eqx_quant.nn.accumulate: pass at least one batch argument with a leading "
                "microbatch axis after the model."
            )
        sizes = {jnp.shape(b)[0] for b in jax.tree.leaves(batches)}
        if len(sizes) != 1:
            raise ValueError(
                "eqx_quant.nn.accumulate: every batch argument needs the same leading "
                f"microbatch axis, got lengths {sorted(sizes)}."
            )
        count = sizes.pop()
        shapes = jax.eval_shape(lambda: observe(model, *jax.tree.map(lambda b: b[0], batches)))
        zeros = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes[1:])

        def body(carry, micro):
            grads_sum, obs_max = carry
            value, grads, obs = observe(model, *micro)
            grads_sum = jax.tree.map(jnp.add, grads_sum, grads)
            obs_max = jax.tree.map(_combine, obs_max, obs)
            return (grads_sum, obs_max), value

        (grads_sum, obs_max), values = jax.lax.scan(body, zeros, batches)
        grads = jax.tree.map(lambda g: g / count, grads_sum)
        if has_aux:
            loss, aux = values
            value = (jnp.mean(loss), aux)
        else:
            value = jnp.mean(values)
        return value, grads, _advance(model, obs_max)

    return wrapped


def _combine(a, b):
    """Two microbatches' `[amax, calls]`: the larger amax; calls is the larger count (each
    microbatch sees the layer once, so more than 1 still means a layer called twice)."""
    return jnp.maximum(a, b)
