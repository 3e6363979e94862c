"""What every quantized layer has: a recipe, its state, and the checks of a call."""

import equinox as eqx
import jax
import jax.numpy as jnp
from equinox import AbstractClassVar, AbstractVar
from jaxtyping import Array

from ._dense import DenseQuantizers, check_layer_key, check_operand_dtypes, roles_with_sr
from ._recipes import AbstractRecipe
from ._state import ScalingState

_ROLES = ("x", "kernel", "grad")


class AbstractQuantizedLayer(eqx.Module):
    """A layer whose GEMMs quantize their operands as `recipe` says, keeping `state` (None
    for stateless recipes). `eqx_quant.nn.value_and_grad`, `accumulate`, `stats` and
    `quantize_model` find layers by this type.

    `probe` is None, except inside `eqx_quant.nn.stats`, which puts a float32 `(3, 4)` array
    of zeros there; the layer's backward pass writes into its cotangent, per operand (x,
    kernel, output gradient), `[scale, amax, saturated fraction, flushed fraction]`."""

    recipe: AbstractVar[AbstractRecipe | None]
    state: AbstractVar[ScalingState | None]
    probe: AbstractVar[Array | None]  # None, except inside `eqx_quant.nn.stats`
    reports_stats: AbstractClassVar[bool]  # whether the backward pass fills `probe`


def check_recipe(where: str, recipe) -> None:
    if recipe is not None and not isinstance(recipe, AbstractRecipe):
        raise TypeError(
            f"{where}: recipe must be an eqx_quant.nn recipe (DelayedScaling(), "
            "CurrentScaling(), MXFP8BlockScaling(), NVFP4BlockScaling()) or None for the "
            f"unquantized layer, got {type(recipe).__name__}."
        )


def check_init_args(where: str, use_bias, dtype, key) -> None:
    if not isinstance(use_bias, bool):
        raise TypeError(f"{where}: use_bias must be a bool, got {use_bias!r}.")
    if dtype is not None and not jnp.issubdtype(jnp.dtype(dtype), jnp.floating):
        raise TypeError(
            f"{where}: dtype must be a floating dtype (e.g. jnp.float32, jnp.bfloat16) or None, "
            f"got {jnp.dtype(dtype).name}."
        )
    if not isinstance(key, jax.Array):
        raise TypeError(
            f"{where}: key must be a jax.random.key (e.g. jax.random.key(0)), got "
            f"{type(key).__name__}."
        )


def layer_quantizers(layer: AbstractQuantizedLayer, num_groups: int | None) -> DenseQuantizers:
    """The layer's quantizers, built from its recipe and its state."""
    if num_groups is None:
        return layer.recipe.dense_quantizers(layer.state)
    return layer.recipe.grouped_quantizers(layer.state, num_groups)


def receivers_of(state: ScalingState | None) -> DenseQuantizers:
    """The `observed` receiver of each operand's state (None where there is none)."""
    return DenseQuantizers(
        *(None if state is None or getattr(state, r) is None else getattr(state, r).observed
          for r in _ROLES)
    )


def layer_key(name: str, qs: DenseQuantizers, key):
    """The key a layer's quantizers `qs` use: `key` where one rounds stochastically (then it
    is required), else None. Like `eqx.nn.Linear`, a layer takes a key it does not need, so
    that model code can pass keys whatever the recipe."""
    if not roles_with_sr(qs):
        return None
    if key is not None and not isinstance(key, jax.Array):
        raise TypeError(f"{name}: key must be a jax.random.key, got {type(key).__name__}.")
    check_layer_key(name, qs, key)
    return key


def check_layer_input(name: str, x, in_features: int) -> None:
    check_operand_dtypes(name, (("x", x),))
    if x.ndim < 1 or x.shape[-1] != in_features:
        raise ValueError(
            f"{name}: x must have shape (*batch, in_features) = (*batch, {in_features}), got "
            f"{x.shape}."
        )
