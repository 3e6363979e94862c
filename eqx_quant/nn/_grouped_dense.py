"""`grouped_dense`: the MoE expert layer, `dense`'s wiring with the grouped ops (as TE's
`transformer_engine/jax/dense.py`).

    forward   gx = grouped_quantize(x, sizes, q.x)      wk = vmap(quantize)(kernel, q.kernel)
              y  = grouped_gemm(gx, wk) + bias[g]        (x rowwise, each expert colwise)
    backward  gg, dbias = grouped_quantize_dbias(dy, sizes, q.grad)
              dx = grouped_gemm(gg, wk, rhs_contracting=1)   (both rowwise)
              dk = grouped_wgrad(gx, gg)                     (both colwise)

As in `dense`, the cotangent of `quantizers` is their next state.
"""

import functools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from beartype import beartype
from jaxtyping import Array, Int, PRNGKeyArray, Shaped, jaxtyped

from .._core import (
    HighPrecision,
    explicit_sharding,
    union_axes,
    validated_by,
)
from .._gemm import grouped_gemm, grouped_wgrad, row_group
from .._quantize import (
    Impl,
    check_block_shape,
    check_group_sizes,
    check_grouped,
    check_sizes_now,
    grouped_quantize,
    grouped_quantize_dbias,
    quantize,
)
from .._quantizer import (
    AbstractBlockQuantizer,
    DelayedScaleQuantizer,
    GroupedDelayedScaleQuantizer,
)
from ._dense import (
    DenseQuantizers,
    check_families,
    check_layer_key,
    check_operand_dtypes,
    check_quantizer_set,
    key_for_roles,
    next_state,
    observed_cotangent,
    reduce_to_primals,
    roles_with_sr,
    state_zeros,
)
from ._experts import expert_parallel
from ._state import check_observed


class _Static(NamedTuple):
    quantizers: DenseQuantizers  # the static part (arrays removed)
    observe: str | None  # a layer's name: observed amaxes go to `receivers` (as in `dense`)
    manual: tuple[tuple[str, ...], ...]  # in shard_map: axes x, kernel, bias, state vary over
    shardings: tuple  # Explicit axes: x's, kernel's, bias' sharding (else None)
    has_bias: bool
    check: bool
    impl: str
    x_dtype: str
    kernel_dtype: str
    bias_dtype: str | None


def _quantize_experts(kernel, quantizer, key, impl):
    """One `quantize` per expert (a stack of delayed states is mapped with the weights)."""
    groups = kernel.shape[0]
    keys = None if key is None else jax.random.split(key, groups)
    stacked = isinstance(quantizer, DelayedScaleQuantizer)
    q_axis = 0 if stacked else None
    k_axis = None if keys is None else 0

    def one(w, q, k):
        return quantize(w, q, 1, key=k, impl=impl)

    return jax.vmap(one, in_axes=(0, q_axis, k_axis))(kernel, quantizer, keys)


def _forward(static: _Static, x, kernel, group_sizes, bias, q_arrays, receivers, key):
    qs = eqx.combine(q_arrays, static.quantizers)
    keys = key_for_roles(key, qs)
    gx = grouped_quantize(x, group_sizes, qs.x, key=keys["x"], check=static.check,
                          impl=static.impl)
    wk = _quantize_experts(kernel, qs.kernel, keys["kernel"], static.impl)
    y = grouped_gemm(gx, wk, out_dtype=jnp.float32)
    if static.has_bias:
        gid = row_group(group_sizes, x.shape[0])
        inside = (gid < bias.shape[0])[:, None]
        row_bias = bias.astype(jnp.float32)[jnp.minimum(gid, bias.shape[0] - 1)]
        y = y + jnp.where(inside, row_bias, jnp.float32(0))
    return y.astype(x.dtype), (gx, wk, group_sizes, q_arrays, receivers, keys["grad"])


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _grouped_dense_vjp(static, x, kernel, group_sizes, bias, q_arrays, receivers, key):
    return _forward(static, x, kernel, group_sizes, bias, q_arrays, receivers, key)[0]


def _grouped_dense_bwd(static: _Static, residuals, dy):
    gx, wk, group_sizes, q_arrays, receivers, grad_key = residuals
    qs = eqx.combine(q_arrays, static.quantizers)
    if static.observe is not None:
        check_observed(static.observe, q_arrays, receivers)
    kw = dict(key=grad_key, check=False, impl=static.impl)
    if static.has_bias:
        gg, dbias = grouped_quantize_dbias(dy, group_sizes, qs.grad, **kw)
        dbias = dbias.astype(static.bias_dtype)
    else:
        gg, dbias = grouped_quantize(dy, group_sizes, qs.grad, **kw), None
    dx = grouped_gemm(gg, wk, rhs_contracting=1, out_dtype=static.x_dtype)
    dk = grouped_wgrad(gx, gg, out_dtype=static.kernel_dtype, check=False)
    # Inside shard_map, as in `dense`: gradients of invariant values summed, amaxes maxed.
    dx, dk, dbias, amaxes = reduce_to_primals(
        static.manual, (dx, dk, dbias), (gx.amax, wk.amax, gg.amax)
    )
    # On Explicit axes each gradient is typed with its primal's sharding.
    dx, dk, dbias = (v if v is None or sh is None else jax.sharding.reshard(v, sh)
                     for v, sh in zip((dx, dk, dbias), static.shardings))
    if static.observe is not None:
        ct_q, ct_receivers = state_zeros(q_arrays), observed_cotangent(receivers, amaxes)
    else:
        ct_q, ct_receivers = next_state(qs, amaxes), None
    ct_sizes = np.zeros(group_sizes.shape, jax.dtypes.float0)
    return dx, dk, ct_sizes, dbias, ct_q, ct_receivers, None


_grouped_dense_vjp.defvjp(_forward, _grouped_dense_bwd)


def _check_kernel_quantizer(where: str, kernel, q) -> None:
    groups = kernel.shape[0]
    if isinstance(q, GroupedDelayedScaleQuantizer):
        raise TypeError(
            f"{where}: each expert's weight is quantized on its own (one quantize per expert); "
            "for delayed scaling pass a stack of G DelayedScaleQuantizer states, e.g. "
            f"jax.vmap(lambda _: eqx_quant.DelayedScaleQuantizer(...))(jnp.arange({groups}))."
        )
    if isinstance(q, DelayedScaleQuantizer) and q.scale.shape != (groups, 1):
        raise ValueError(
            f"{where}: a DelayedScaleQuantizer for the experts must hold one state per expert "
            f"(scale of shape ({groups}, 1)), got scale of shape {q.scale.shape}. Build it "
            f"with jax.vmap(lambda _: eqx_quant.DelayedScaleQuantizer(...))(jnp.arange({groups}))."
        )
    if isinstance(q, AbstractBlockQuantizer):
        check_block_shape(where, jax.ShapeDtypeStruct(kernel.shape[1:], kernel.dtype), q, 1)
        if getattr(q, "use_rht", False):
            raise ValueError(f"{where}: use_rht is not supported in grouped_dense.")


def check_grouped_dense(x, kernel, group_sizes, bias, quantizers, key, check, impl,
                        expert_axis=None) -> None:
    fn = "grouped_dense"
    check_operand_dtypes(fn, (("x", x), ("kernel", kernel), ("bias", bias)))
    check_quantizer_set(fn, quantizers)
    if x.ndim != 2 or kernel.ndim != 3 or x.shape[1] != kernel.shape[1]:
        raise ValueError(
            f"{fn}: x must be (tokens, K) and kernel (G, K, N), got x {x.shape} and kernel "
            f"{kernel.shape}."
        )
    groups = check_group_sizes(fn, x, group_sizes)
    if not isinstance(check, bool):
        raise TypeError(f"{fn}: check must be True or False, got {check!r}.")
    if expert_axis is None:
        check_sizes_now(fn, group_sizes, x.shape[0], check, "x")
    elif not isinstance(expert_axis, str):
        raise TypeError(
            f"{fn}: expert_axis must be the name of a mesh axis (a str) or None, got "
            f"{expert_axis!r}."
        )
    if kernel.shape[0] != groups:
        raise ValueError(
            f"{fn}: kernel holds {kernel.shape[0]} experts but group_sizes has {groups} groups."
        )
    if bias is not None and bias.shape != (groups, kernel.shape[2]):
        raise ValueError(
            f"{fn}: bias must be (G, N) = {(groups, kernel.shape[2])}, got {bias.shape}."
        )
    # The grouped checks do not depend on the column count, so x stands in for dy here.
    sr = roles_with_sr(quantizers)
    for role in ("x", "grad"):
        role_key = key if role in sr else None
        check_grouped(f"{fn} (quantizers.{role})", x, group_sizes, getattr(quantizers, role),
                       -1, impl, role_key)
    _check_kernel_quantizer(f"{fn} (quantizers.kernel)", kernel, quantizers.kernel)
    check_layer_key(fn, quantizers, key)
    check_families(fn, quantizers)


@validated_by(check_grouped_dense)
@jaxtyped(typechecker=beartype)
def grouped_dense(
    x: HighPrecision[Array, "M K"],
    kernel: HighPrecision[Array, "G K N"],
    group_sizes: Int[Array, " G"],
    bias: HighPrecision[Array, "G N"] | None = None,
    *,
    quantizers: DenseQuantizers,
    key: PRNGKeyArray | None = None,
    check: bool = True,
    impl: Impl = "auto",
    expert_axis: str | None = None,
) -> Shaped[Array, "M N"]:
    """The MoE expert layer: token row m of group g times `kernel[g]`, plus `bias[g]`, with
    every GEMM (forward, input gradient, weight gradient) on quantized operands.

    **Arguments:**

    - `x`: `(M, K)` tokens sorted by expert; `group_sizes`: int32 `(G,)` tokens per expert.
    - `kernel`: `(G, K, N)`, one weight per expert; `bias`: None or `(G, N)`.
    - `quantizers`: an `eqx_quant.DenseQuantizers`. `x` and `grad` quantize grouped (a
      `GroupedDelayedScaleQuantizer` for delayed scaling); `kernel` quantizes each expert
      on its own (for delayed scaling a stack of G `DelayedScaleQuantizer` states).
    - `key`: required when a quantizer rounds stochastically (as in `dense`; the experts'
      keys are split from the kernel's).
    - `check`: raise at run time if `group_sizes` does not sum to M (as `grouped_quantize`).
    - `impl`: as in `eqx_quant.quantize`.
    - `expert_axis`: expert parallelism over this axis of the current mesh (`jax.set_mesh`):
      device d holds experts `[d G/D, (d+1) G/D)` (the kernel, bias and per-expert quantizer
      states split along their leading axis) and token rows `[d M/D, (d+1) M/D)`, which are
      its experts' tokens after the model's dispatch; its slice of `group_sizes` counts them
      and sums to at most `M/D` (rows past give 0). Every op runs on the device's own rows
      and experts: nothing is gathered (docs/distributed.md).

    **Returns:** `(M, N)` in x's dtype; rows past the last group are 0.

    **Gradients:** as `dense`: `dx`, `dkernel` from the quantized GEMMs, `dbias` from
    `grouped_quantize_dbias`, and the quantizers' cotangent is their next state.
    """
    return grouped_dense_call(x, kernel, group_sizes, bias, quantizers, None, key, check, impl,
                              None, expert_axis)


def grouped_dense_call(x, kernel, group_sizes, bias, quantizers, receivers, key, check, impl,
                       observe: str | None, expert_axis: str | None = None):
    """`grouped_dense` after its checks; a layer named `observe` passes its receivers."""
    q_arrays, q_static = eqx.partition(quantizers, eqx.is_array)
    if expert_axis is not None:
        def local(x, kernel, sizes, bias, q_arrays, receivers, key):
            qs = eqx.combine(q_arrays, q_static)
            return grouped_dense_call(x, kernel, sizes, bias, qs, receivers, key, False, impl,
                                      observe)

        return expert_parallel(local, expert_axis, x, kernel, group_sizes, bias, q_arrays,
                               receivers, key, check)
    bias_dtype = None if bias is None else bias.dtype.name
    manual = tuple(union_axes(v) for v in (x, kernel, bias, q_arrays))
    shardings = tuple(None if v is None else explicit_sharding(v) for v in (x, kernel, bias))
    static = _Static(q_static, observe, manual, shardings, bias is not None, bool(check), impl,
                     x.dtype.name, kernel.dtype.name, bias_dtype)
    return _grouped_dense_vjp(static, x, kernel, group_sizes, bias, q_arrays, receivers, key)
