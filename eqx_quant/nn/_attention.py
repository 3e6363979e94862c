"""`MultiheadAttention`: `eqx.nn.MultiheadAttention` whose quantized projections get random
bits.

Equinox's attention calls its four projections without a key (its own key is for dropout).
A projection whose recipe rounds stochastically (`NVFP4BlockScaling`) needs one per step, so
`quantize_model` wraps an attention with such projections in this module: its call takes the
same arguments, splits `key` into one for dropout and one per projection, and runs Equinox's
own attention with each projection bound to its key. Without such projections it is not
used, and the model keeps Equinox's attention.
"""

import equinox as eqx
import jax
from jaxtyping import Array, PRNGKeyArray

from ._dense import roles_with_sr
from ._layer import AbstractQuantizedLayer, layer_quantizers

PROJECTIONS = ("query_proj", "key_proj", "value_proj", "output_proj")


class _Keyed(eqx.Module):
    """A projection called with a fixed key (Equinox's attention maps it over the sequence:
    the quantized layer folds the sequence into its GEMM rows, one key for all of them)."""

    layer: eqx.Module
    key: PRNGKeyArray

    def __call__(self, x: Array, *, key=None) -> Array:
        del key
        return self.layer(x, key=self.key)


def needs_keys(layer) -> bool:
    """Whether a layer is a quantized one whose recipe rounds stochastically."""
    if not isinstance(layer, AbstractQuantizedLayer) or layer.recipe is None:
        return False
    return bool(roles_with_sr(layer_quantizers(layer, None)))


def _get(attention, name: str):
    return getattr(attention, name)


class MultiheadAttention(eqx.Module):
    """An `eqx.nn.MultiheadAttention` (in `attention`, with `eqx_quant.nn.Linear`
    projections) whose projections round stochastically: called as Equinox's attention is,
    `key` (required then, a new one per step) also gives each projection its random bits.
    `quantize_model` builds it; its fields are those of the wrapped attention."""

    attention: eqx.nn.MultiheadAttention

    def __init__(self, attention: eqx.nn.MultiheadAttention):
        if not isinstance(attention, eqx.nn.MultiheadAttention):
            raise TypeError(
                "eqx_quant.nn.MultiheadAttention: attention must be an "
                f"eqx.nn.MultiheadAttention, got {type(attention).__name__}."
            )
        self.attention = attention

    def __call__(self, query: Array, key_: Array, value: Array, mask=None, *,
                 key: PRNGKeyArray | None = None, inference: bool | None = None,
                 process_heads=None) -> Array:
        """Equinox's attention; `key` gives dropout and the projections their bits."""
        if key is None:
            raise ValueError(
                "eqx_quant.nn.MultiheadAttention: its quantized projections round "
                "stochastically and need random bits: pass key=jax.random.key(seed), a new "
                "one per step (it also serves dropout)."
            )
        keys = jax.random.split(key, 1 + len(PROJECTIONS))
        bound = tuple(_Keyed(_get(self.attention, n), k)
                      for n, k in zip(PROJECTIONS, keys[1:]))
        attention = eqx.tree_at(
            lambda a: tuple(_get(a, n) for n in PROJECTIONS), self.attention, bound
        )
        return attention(query, key_, value, mask, key=keys[0], inference=inference,
                         process_heads=process_heads)
