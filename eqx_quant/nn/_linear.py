"""`Linear`: a drop-in for `eqx.nn.Linear` whose three GEMMs read quantized operands."""

import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, PRNGKeyArray

from .._core import union_axes
from ._dense import (
    DenseQuantizers,
    backward_products,
    check_dense,
    forward_product,
    key_for_roles,
    make_static,
    observed_cotangent,
    quantize_operands,
    state_zeros,
)
from ._folded import folded
from ._layer import (
    AbstractQuantizedLayer,
    check_init_args,
    check_layer_input,
    check_recipe,
    layer_key,
    layer_quantizers,
    receivers_of,
)
from ._recipes import AbstractRecipe
from ._state import ScalingState, check_observed
from ._stats import operand_stats


def _count(x) -> int:
    """The number of rows of x seen as (M, features)."""
    return math.prod(x.shape[:-1])


def row_multiple(qs: DenseQuantizers) -> int:
    """The row count the quantizers need: 16 where a Hadamard transform runs down the
    columns (NVFP4 with RHT), else 1. The layer appends zero rows, which change no value,
    amax or random bit of the others."""
    return 16 if any(getattr(q, "use_rht", False) for q in (qs.x, qs.grad)) else 1


def _is_none(x) -> bool:
    return x is None


def _linear_op(static, layer_name: str):
    """The layer's function of (x, weight, bias, quantizer arrays, receivers, key), with a
    `custom_vjp` over forward and backward `custom_vmap`s (see `_folded`)."""

    def rows(a, multiple):
        """a as (M, features), zero rows appended to a multiple of `multiple`."""
        flat = a.reshape((-1, a.shape[-1]))
        pad = -flat.shape[0] % multiple
        return jnp.pad(flat, ((0, pad), (0, 0))) if pad else flat

    def primal(x, weight, bias, q_arrays, key):
        qs = eqx.combine(q_arrays, static.quantizers)
        x2 = rows(x, row_multiple(qs))
        cx, ck = quantize_operands(static, x2, weight, qs, key_for_roles(key, qs))
        y2 = forward_product(static, cx, ck, bias, x.dtype)
        return y2[: _count(x)].reshape(x.shape[:-1] + y2.shape[-1:])

    def grads(x, weight, q_arrays, receivers, probe, key, dy):
        qs = eqx.combine(q_arrays, static.quantizers)
        check_observed(layer_name, q_arrays, receivers)
        keys = key_for_roles(key, qs)
        multiple = row_multiple(qs)
        # x and the weight are quantized again rather than kept from the forward pass: the
        # same bytes (same scales, same random bits), and residuals that map under vmap.
        cx, ck = quantize_operands(static, rows(x, multiple), weight, qs, keys)
        dy2 = rows(dy, multiple)
        dx2, dw, db, amaxes, cg = backward_products(static, cx, ck, qs, keys["grad"], dy2)
        dx = dx2[: _count(x)].reshape(x.shape)
        ct_probe = None if probe is None else operand_stats(
            ((rows(x, multiple), cx), (weight, ck), (dy2, cg))
        )
        return dx, dw, db, observed_cotangent(receivers, amaxes), ct_probe

    def grads_batched(out):
        unmapped = jax.tree.map(lambda _: False, out[1:])
        return (True, *unmapped)

    primal_f = folded(primal, (0,), lambda _: True)
    grads_f = folded(grads, (0, 6), grads_batched)

    @jax.custom_vjp
    def op(x, weight, bias, q_arrays, receivers, probe, key):
        return primal_f(x, weight, bias, q_arrays, key)

    def op_fwd(x, weight, bias, q_arrays, receivers, probe, key):
        y = primal_f(x, weight, bias, q_arrays, key)
        return y, (x, weight, q_arrays, receivers, probe, key)

    def op_bwd(residuals, dy):
        x, weight, q_arrays, receivers, probe, key = residuals
        dx, dw, db, ct_receivers, ct_probe = grads_f(x, weight, q_arrays, receivers, probe, key,
                                                     dy)
        return dx, dw, db, state_zeros(q_arrays), ct_receivers, ct_probe, None

    op.defvjp(op_fwd, op_bwd)
    return op


class Linear(AbstractQuantizedLayer):
    """`eqx.nn.Linear` with its forward, input-gradient and weight-gradient GEMMs on
    quantized operands, as the recipe says.

    The weight is `(out_features, in_features)` and is initialised as `eqx.nn.Linear` does, so
    `Linear.from_linear` converts a layer without changing its values. Unlike
    `eqx.nn.Linear`, it takes any batch: `x` of shape `(*batch, in_features)` gives
    `(*batch, out_features)`, the batch folded into the GEMM rows with one scale per tensor;
    under `jax.vmap` over examples it computes exactly the same (see `eqx_quant.nn`).

    **Arguments:**

    - `in_features`, `out_features`: ints (Equinox's `"scalar"` is not supported).
    - `use_bias`: whether to add a bias (default True).
    - `dtype`: the parameters' dtype (default: JAX's default float).
    - `recipe`: an `eqx_quant.nn` recipe (`DelayedScaling()`, `CurrentScaling()`,
      `MXFP8BlockScaling()`, `NVFP4BlockScaling()`), or None for the plain high-precision
      layer (for parity runs).
    - `key`: a `jax.random.key` for the initialisation.

    **Call:** `layer(x, *, key=None)`; `key` (a new one per step) is needed when the recipe
    rounds stochastically (`NVFP4BlockScaling`), and ignored otherwise, as `eqx.nn.Linear`
    ignores it.
    """

    weight: Array
    bias: Array | None
    state: ScalingState | None
    probe: Array | None
    recipe: AbstractRecipe | None = eqx.field(static=True)
    in_features: int = eqx.field(static=True)
    out_features: int = eqx.field(static=True)
    use_bias: bool = eqx.field(static=True)
    reports_stats: ClassVar[bool] = True

    def __init__(
        self,
        in_features: int,
        out_features: int,
        use_bias: bool = True,
        dtype=None,
        *,
        recipe: AbstractRecipe | None,
        key: PRNGKeyArray,
    ):
        for name, n in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ValueError(
                    f"eqx_quant.nn.Linear: {name} must be an int >= 1, got {n!r} (Equinox's "
                    "'scalar' is not supported: reshape to (..., 1))."
                )
        check_recipe("eqx_quant.nn.Linear", recipe)
        check_init_args("eqx_quant.nn.Linear", use_bias, dtype, key)
        plain = eqx.nn.Linear(in_features, out_features, use_bias, dtype, key=key)
        self.weight, self.bias = plain.weight, plain.bias
        self.state = None if recipe is None else recipe.init_state()
        self.probe = None
        self.recipe = recipe
        self.in_features, self.out_features, self.use_bias = in_features, out_features, use_bias

    @classmethod
    def from_linear(cls, linear: eqx.nn.Linear, recipe: AbstractRecipe | None) -> "Linear":
        """The quantized twin of an `eqx.nn.Linear`, with its weight and bias as they are."""
        if not isinstance(linear, eqx.nn.Linear):
            raise TypeError(
                "eqx_quant.nn.Linear.from_linear: linear must be an eqx.nn.Linear, got "
                f"{type(linear).__name__}."
            )
        if "scalar" in (linear.in_features, linear.out_features):
            raise ValueError(
                "eqx_quant.nn.Linear.from_linear: layers with in_features or out_features "
                "'scalar' are not supported; skip them (filter_fn in quantize_model)."
            )
        check_recipe("eqx_quant.nn.Linear.from_linear", recipe)
        shaped = jax.ShapeDtypeStruct(linear.weight.shape, linear.weight.dtype)
        new = eqx.filter_eval_shape(
            lambda: cls(linear.in_features, linear.out_features, linear.use_bias,
                        shaped.dtype, recipe=recipe, key=jax.random.key(0))
        )
        state = None if recipe is None else recipe.init_state()
        if linear.use_bias:
            return eqx.tree_at(lambda m: (m.weight, m.bias, m.state), new,
                               (linear.weight, linear.bias, state), is_leaf=_is_none)
        return eqx.tree_at(lambda m: (m.weight, m.state), new, (linear.weight, state),
                           is_leaf=_is_none)

    def __call__(self, x: Array, *, key: PRNGKeyArray | None = None) -> Array:
        """`x @ weight.T + bias` for `x` of shape `(*batch, in_features)`."""
        name = "eqx_quant.nn.Linear"
        check_layer_input(name, x, self.in_features)
        if self.recipe is None:
            y = x @ self.weight.T.astype(x.dtype)
            if self.bias is None:
                return y
            return y + self.bias.astype(y.dtype).reshape((1,) * (y.ndim - 1) + (-1,))
        qs = layer_quantizers(self, None)
        key = layer_key(name, qs, key)
        # The checks see a stand-in of row count 16: any batch works (see row_multiple).
        stand_in = jax.ShapeDtypeStruct((16, self.in_features), x.dtype)
        check_dense(stand_in, self.weight, self.bias, qs, ((-1,), (-1,)), key, (), "auto")
        q_arrays, q_static = eqx.partition(qs, eqx.is_array)
        static = make_static(stand_in, self.weight, self.bias, 1, True, q_static, "auto", ())
        # Inside shard_map: the manual axes of the real operands (the stand-in has none).
        static = static._replace(
            manual=tuple(union_axes(v) for v in (x, self.weight, self.bias, q_arrays))
        )
        op = _linear_op(static, name)
        return op(x, self.weight, self.bias, q_arrays, receivers_of(self.state), self.probe, key)
