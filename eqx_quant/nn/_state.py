"""A layer's delayed-scaling state, stored where optimizers and gradient filters pass it by.

The scale and amax history are float32 values kept as their bit patterns (uint32). Equinox's
`is_inexact_array` is then False for them, so `eqx.filter_grad`, `eqx.filter(model,
eqx.is_inexact_array)` (what optax sees: no Adam moments, no weight decay, no share of the
global gradient norm), `eqx.apply_updates` and a cast of the model to bfloat16 all leave the
state alone, and `eqx.tree_serialise_leaves` saves it bit for bit.

`observed` is a receiver: `eqx_quant.nn.value_and_grad` puts a float32 array of zeros there
for the duration of one gradient computation, and the layer's backward pass writes
`[amax, 1]` for each call into its cotangent. The helper then reads how many calls
contributed and advances the state once.
"""

from typing import Final

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, UInt32


def _bits(a: Array) -> Array:
    return jax.lax.bitcast_convert_type(jnp.asarray(a, jnp.float32), jnp.uint32)


def _value(a: Array) -> Array:
    return jax.lax.bitcast_convert_type(a, jnp.float32)


class DelayedState(eqx.Module):
    """One operand's delayed-scaling state: the scale and the amax history (leading axes:
    experts, or layers of a stack built with `jax.vmap`).

    **Fields:**

    - `scale`: the float32 scale, stored as its bits (uint32), shape `(..., 1)`.
    - `amax_history`: the float32 amax history, stored as bits, shape `(..., L)`.
    - `observed`: None, except inside `eqx_quant.nn.value_and_grad` (see the module notes).

    Read the values with `scale_value()` and `history_value()`.
    """

    scale: UInt32[Array, "*lead 1"]
    amax_history: UInt32[Array, "*lead history"]
    observed: Float[Array, "*lead 2"] | None = None

    @classmethod
    def from_values(cls, scale, amax_history) -> "DelayedState":
        return cls(_bits(scale), _bits(amax_history))

    def scale_value(self) -> Float[Array, "*lead 1"]:
        return _value(self.scale)

    def history_value(self) -> Float[Array, "*lead history"]:
        return _value(self.amax_history)

    def with_receiver(self) -> "DelayedState":
        shape = self.amax_history.shape[:-1] + (2,)
        return eqx.tree_at(lambda s: s.observed, self, jnp.zeros(shape, jnp.float32),
                           is_leaf=lambda x: x is None)

    def without_receiver(self) -> "DelayedState":
        return eqx.tree_at(lambda s: s.observed, self, None, is_leaf=lambda x: x is None)


class ScalingState(eqx.Module):
    """The state of one layer's three operands (x, kernel, output gradient); a field is None
    where its recipe keeps no state."""

    x: DelayedState | None
    kernel: DelayedState | None
    grad: DelayedState | None


MSG_STATE_NOT_OBSERVED: Final = (
    "{layer}: this layer's recipe keeps delayed-scaling state (a scale and an amax history "
    "per operand), and it was differentiated outside eqx_quant.nn.value_and_grad, which "
    "is what advances that state. With eqx.filter_value_and_grad the state would silently "
    "never change. Write\n"
    "    loss, grads, model = eqx_quant.nn.value_and_grad(loss_fn)(model, *batch)\n"
    "    updates, opt_state = optim.update(grads, opt_state, "
    "eqx.filter(model, eqx.is_inexact_array))\n"
    "    model = eqx.apply_updates(model, updates)\n"
    "(eqx_quant.nn.accumulate for microbatches), or use a stateless recipe such as "
    "CurrentScaling."
)


def check_observed(layer: str, q_arrays, receivers) -> None:
    """In a layer's backward pass: every operand with state must have its receiver."""
    for role in ("x", "kernel", "grad"):
        if jax.tree.leaves(getattr(q_arrays, role)) and getattr(receivers, role) is None:
            raise ValueError(MSG_STATE_NOT_OBSERVED.format(layer=layer))
