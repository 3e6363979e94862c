"""`GroupedLinear`: the experts of an MoE layer, one weight per group of token rows."""

import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Int, PRNGKeyArray

from .._gemm import row_group
from ._grouped_dense import check_grouped_dense, grouped_dense_call
from ._layer import (
    AbstractQuantizedLayer,
    check_init_args,
    check_recipe,
    layer_key,
    layer_quantizers,
    receivers_of,
)
from ._recipes import AbstractRecipe
from ._state import ScalingState


class GroupedLinear(AbstractQuantizedLayer):
    """`num_groups` linear layers (MoE experts) applied to the ragged groups of a token
    matrix: rows `[offset_g, offset_g + group_sizes[g])` of `x` go through expert `g`. Every
    GEMM (forward, input gradient, weight gradient) reads quantized operands, as the recipe
    says (every recipe works; `NVFP4BlockScaling` runs without the Hadamard transform here).

    The weight is `(num_groups, in_features, out_features)` (the grouped GEMM's layout) and
    the bias `(num_groups, out_features)`; each expert is initialised as `eqx.nn.Linear`.

    **Arguments:** `num_groups`, `in_features`, `out_features`, `use_bias=True`,
    `dtype=None`, and keyword-only `recipe` (or None for the unquantized layer) and `key`.

    **Call:** `layer(x, group_sizes, *, key=None)` with `x` of shape `(tokens, in_features)`
    sorted by expert and `group_sizes` an int32 `(num_groups,)` array on the device (rows past
    the last group give 0); `key` when the recipe rounds stochastically (ignored otherwise);
    `expert_axis` for expert parallelism over that mesh axis (as `eqx_quant.grouped_dense`);
    `check=False` skips the run-time check that the sizes are non-negative and sum to the
    tokens (on a GPU that check copies the sizes to the host and waits for them, once per
    call: a pipeline stall per MoE layer that a training loop whose router always produces
    valid sizes need not pay).
    """

    weight: Array
    bias: Array | None
    state: ScalingState | None
    probe: Array | None
    recipe: AbstractRecipe | None = eqx.field(static=True)
    num_groups: int = eqx.field(static=True)
    in_features: int = eqx.field(static=True)
    out_features: int = eqx.field(static=True)
    use_bias: bool = eqx.field(static=True)
    reports_stats: ClassVar[bool] = False

    def __init__(
        self,
        num_groups: int,
        in_features: int,
        out_features: int,
        use_bias: bool = True,
        dtype=None,
        *,
        recipe: AbstractRecipe | None,
        key: PRNGKeyArray,
    ):
        name = "eqx_quant.nn.GroupedLinear"
        for arg, n in (("num_groups", num_groups), ("in_features", in_features),
                       ("out_features", out_features)):
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ValueError(f"{name}: {arg} must be an int >= 1, got {n!r}.")
        check_recipe(name, recipe)
        check_init_args(name, use_bias, dtype, key)
        dtype = jnp.result_type(float) if dtype is None else dtype
        bound = 1.0 / math.sqrt(in_features)
        wkey, bkey = jax.random.split(key)
        shape = (num_groups, in_features, out_features)
        self.weight = jax.random.uniform(wkey, shape, dtype, -bound, bound)
        self.bias = (
            jax.random.uniform(bkey, (num_groups, out_features), dtype, -bound, bound)
            if use_bias else None
        )
        self.state = None if recipe is None else recipe.init_state(num_groups)
        self.probe = None
        self.recipe = recipe
        self.num_groups, self.in_features, self.out_features = num_groups, in_features, out_features
        self.use_bias = use_bias

    def __call__(
        self,
        x: Array,
        group_sizes: Int[Array, " G"],
        *,
        key: PRNGKeyArray | None = None,
        expert_axis: str | None = None,
        check: bool = True,
    ) -> Array:
        if self.recipe is None and expert_axis is not None:
            raise ValueError(
                "eqx_quant.nn.GroupedLinear: expert_axis needs a recipe (the unquantized layer "
                "runs jax.lax.ragged_dot, which XLA partitions itself)."
            )
        if self.recipe is None:
            return self._plain(x, group_sizes)
        qs = layer_quantizers(self, self.num_groups)
        key = layer_key("eqx_quant.nn.GroupedLinear", qs, key)
        check_grouped_dense(x, self.weight, group_sizes, self.bias, qs, key, check, "auto",
                            expert_axis)
        return grouped_dense_call(
            x, self.weight, group_sizes, self.bias, qs, receivers_of(self.state), key, check,
            "auto", "eqx_quant.nn.GroupedLinear", expert_axis,
        )

    def _plain(self, x, group_sizes) -> Array:
        name = "eqx_quant.nn.GroupedLinear"
        if x.ndim != 2 or x.shape[1] != self.in_features:
            raise ValueError(
                f"{name}: x must be (tokens, in_features) = (tokens, {self.in_features}), got "
                f"{x.shape}."
            )
        y = jax.lax.ragged_dot(x, self.weight.astype(x.dtype), group_sizes)
        if self.bias is None:
            return y
        gid = row_group(group_sizes, x.shape[0])
        inside = (gid < self.num_groups)[:, None]
        row_bias = self.bias.astype(y.dtype)[jnp.minimum(gid, self.num_groups - 1)]
        return y + jnp.where(inside, row_bias, jnp.zeros((), y.dtype))
