"""`quantize_model` and `MLP`: quantized twins of Equinox models."""

from collections.abc import Callable

import equinox as eqx
import jax
from jaxtyping import Array, PRNGKeyArray

from ._attention import PROJECTIONS, MultiheadAttention, needs_keys
from ._layer import check_recipe
from ._linear import Linear
from ._recipes import AbstractRecipe

RecipeFor = AbstractRecipe | None | Callable[[tuple, eqx.nn.Linear], AbstractRecipe | None]


def _is_linear(x) -> bool:
    return isinstance(x, eqx.nn.Linear)


def _is_attention(x) -> bool:
    return isinstance(x, (eqx.nn.MultiheadAttention, MultiheadAttention))


def _needs_keyed_attention(attention: eqx.nn.MultiheadAttention) -> bool:
    """Whether a converted Equinox attention has a projection that rounds stochastically
    (its key must then reach them: `_attention.py`)."""
    return any(needs_keys(getattr(attention, name)) for name in PROJECTIONS)


def quantize_model(model, recipe: RecipeFor, *, filter_fn=None):
    """Replace every `eqx.nn.Linear` in `model` (at any depth: inside `eqx.nn.MLP`,
    `eqx.nn.MultiheadAttention`, lists, your own modules) by `eqx_quant.nn.Linear` with the
    same weight and bias.

    **Arguments:**

    - `model`: any pytree of Equinox modules.
    - `recipe`: a recipe for every converted layer, or a function `(path, linear) -> recipe`
      (None keeps that layer unquantized but still converts it).
    - `filter_fn`: `(path, linear) -> bool`; layers for which it is False stay
      `eqx.nn.Linear` (e.g. the first and last layers, or shapes to leave alone).

    `path` is the layer's JAX key path (`jax.tree_util.keystr(path)` gives e.g.
    `".layers[0].attention.query_proj"`). Layers with `"scalar"` features are kept as they are.

    Equinox's attention calls its projections without a key. Where a converted projection
    rounds stochastically (`NVFP4BlockScaling`), the attention is wrapped in
    `eqx_quant.nn.MultiheadAttention`, which is called the same way and passes its `key` (then
    required) on to the projections; its fields are under `.attention`.

    !!! Example

        ```python
        model = eqx_quant.nn.quantize_model(
            model, eqx_quant.nn.CurrentScaling(),
            filter_fn=lambda path, lin: "head" not in jax.tree_util.keystr(path),
        )
        ```
    """
    if filter_fn is not None and not callable(filter_fn):
        raise TypeError(
            "quantize_model: filter_fn must be a function (path, linear) -> bool, got "
            f"{type(filter_fn).__name__}."
        )
    if not callable(recipe) or isinstance(recipe, AbstractRecipe):
        check_recipe("quantize_model", recipe)

    def convert(path, leaf):
        if not _is_linear(leaf) or "scalar" in (leaf.in_features, leaf.out_features):
            return leaf
        if filter_fn is not None and not filter_fn(path, leaf):
            return leaf
        chosen = recipe(path, leaf) if callable(recipe) and not isinstance(
            recipe, AbstractRecipe) else recipe
        check_recipe(f"quantize_model (recipe for {jax.tree_util.keystr(path)})", chosen)
        return Linear.from_linear(leaf, chosen)

    def convert_linears(path, tree):
        return jax.tree_util.tree_map_with_path(
            lambda p, leaf: convert(path + p, leaf), tree, is_leaf=_is_linear)

    def convert_node(path, node):
        if isinstance(node, MultiheadAttention):  # converted before: convert inside it
            inner = convert_linears(path + (jax.tree_util.GetAttrKey("attention"),),
                                    node.attention)
            return MultiheadAttention(inner)
        if isinstance(node, eqx.nn.MultiheadAttention):
            inner = convert_linears(path, node)
            return MultiheadAttention(inner) if _needs_keyed_attention(inner) else inner
        return convert(path, node)

    return jax.tree_util.tree_map_with_path(
        convert_node, model, is_leaf=lambda x: _is_linear(x) or _is_attention(x))


class MLP(eqx.Module):
    """`eqx.nn.MLP` with quantized `Linear` layers: the same arguments, the same
    initialisation, plus `recipe`. Takes any batch `(*batch, in_size)`.

    **Arguments:** `in_size`, `out_size`, `width_size`, `depth`, `activation`,
    `final_activation`, `use_bias`, `use_final_bias`, `dtype`, as `eqx.nn.MLP` (ints only,
    not `"scalar"`), and keyword-only `recipe` and `key`.
    """

    layers: tuple[Linear, ...]
    activation: Callable
    final_activation: Callable

    def __init__(
        self,
        in_size: int,
        out_size: int,
        width_size: int,
        depth: int,
        activation: Callable = jax.nn.relu,
        final_activation: Callable = lambda x: x,
        use_bias: bool = True,
        use_final_bias: bool = True,
        dtype=None,
        *,
        recipe: AbstractRecipe | None,
        key: PRNGKeyArray,
    ):
        check_recipe("eqx_quant.nn.MLP", recipe)
        plain = eqx.nn.MLP(in_size, out_size, width_size, depth, activation, final_activation,
                           use_bias, use_final_bias, dtype, key=key)
        self.layers = tuple(Linear.from_linear(layer, recipe) for layer in plain.layers)
        self.activation = activation
        self.final_activation = final_activation

    def __call__(self, x: Array, *, key: PRNGKeyArray | None = None) -> Array:
        keys = [None] * len(self.layers) if key is None else list(
            jax.random.split(key, len(self.layers)))
        for layer, k in zip(self.layers[:-1], keys[:-1]):
            x = self.activation(layer(x, key=k))
        return self.final_activation(self.layers[-1](x, key=keys[-1]))

