"""`dense`: a linear layer whose three GEMMs (forward, dgrad, wgrad) read quantized operands.

The wiring of TE's `dense()` (`transformer_engine/jax/dense.py`), with our `quantize`,
`quantize_dbias` and `gemm`:

    forward   cx = quantize(x, q.x)  ck = quantize(kernel, q.kernel)  (2-D views: batch x K, K x N)
              y  = gemm(cx, ck) + bias                   (x's rowwise copy, kernel's colwise copy)
    backward  cg, dbias = quantize_dbias(dy, q.grad)     (dbias only when there is a bias)
              dx = gemm(cg, ck)   over N                 (both rowwise copies)
              dk = gemm(cx, cg)   over the batch dims    (both colwise copies)

Delayed scaling needs the amaxes each call observed, and dy's amax exists only in the
backward pass. They leave the way TE's leave: `quantizers` is a differentiable argument, and
its cotangent is the quantizers' next state (each `DelayedScaleQuantizer` advanced with
`update(observed amax)`; stateless quantizers have no arrays). So `jax.grad` with respect to
the quantizers returns the quantizers to use at the next step.
"""

import functools
from collections.abc import Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, PRNGKeyArray, Shaped, jaxtyped

from .._core import HighPrecision, validated_by
from .._gemm import gemm
from .._quantize import (
    Impl,
    check_amax_axes,
    check_block_shape,
    check_quantizer_state,
    key_words_of,
    quantize,
    quantize_dbias,
)
from .._quantizer import (
    AbstractBlockQuantizer,
    AbstractQuantizer,
    DelayedScaleQuantizer,
    GroupedDelayedScaleQuantizer,
    holds_stack,
)


class DenseQuantizers(eqx.Module):
    """The three quantizers of one `dense` layer.

    **Fields:**

    - `x`: quantizes the input (its rowwise copy feeds the forward GEMM, its colwise copy the
      weight-gradient GEMM).
    - `kernel`: quantizes the weights (colwise copy: forward; rowwise copy: input gradient).
    - `grad`: quantizes the output gradient in the backward pass (rowwise: input gradient;
      colwise: weight gradient). TE's recipes use E5M2 or stochastic rounding here.

    Block formats (MXFP8, NVFP4) need both copies, so their quantizers must have
    `q_layout=QuantizeLayout.ROWWISE_COLWISE` (the default). Under `jax.grad`, the cotangent
    of a `DenseQuantizers` is its next state (see `eqx_quant.dense`).
    """

    x: AbstractQuantizer
    kernel: AbstractQuantizer
    grad: AbstractQuantizer


_ROLES = ("x", "kernel", "grad")


class _Static(NamedTuple):
    n: int  # contracted dims: x's trailing n, kernel's leading n
    batch: int  # x's other dims, the leading dims of y and dy
    quantizers: DenseQuantizers  # the static part (arrays removed)
    has_bias: bool
    impl: str
    amax_axes: tuple[str, ...]
    x_dtype: str
    kernel_dtype: str
    bias_dtype: str | None


def roles_with_sr(quantizers: DenseQuantizers) -> tuple[str, ...]:
    return tuple(r for r in _ROLES if getattr(getattr(quantizers, r), "stochastic_rounding", False))


def key_for_roles(key, quantizers: DenseQuantizers) -> dict:
    """One key per quantizer that rounds stochastically (fold_in of its role), else None."""
    return {
        r: jax.random.fold_in(key, i) if r in roles_with_sr(quantizers) else None
        for i, r in enumerate(_ROLES)
    }


def _forward(static: _Static, x, kernel, bias, q_arrays, key):
    qs = eqx.combine(q_arrays, static.quantizers)
    keys = key_for_roles(key, qs)
    n, kw = static.n, dict(impl=static.impl, amax_axes=static.amax_axes)
    cx = quantize(x, qs.x, x.ndim - n, key=keys["x"], **kw)
    ck = quantize(kernel, qs.kernel, n, key=keys["kernel"], **kw)
    dims = (tuple(range(x.ndim - n, x.ndim)), tuple(range(n)))
    y = gemm(cx, ck, dims, out_dtype=jnp.float32)
    if static.has_bias:
        y = y + bias.astype(jnp.float32).reshape((1,) * (x.ndim - n) + bias.shape)
    return y.astype(x.dtype), (cx, ck, q_arrays, keys["grad"])


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _dense_vjp(static: _Static, x, kernel, bias, q_arrays, key):
    return _forward(static, x, kernel, bias, q_arrays, key)[0]


def advance(quantizer, amax):
    """A quantizer's next state for the amax it observed: `update` for delayed scaling (per
    state of a stack, e.g. one per expert), the quantizer itself when it is stateless."""
    if isinstance(quantizer, GroupedDelayedScaleQuantizer):
        return quantizer.update(amax)
    if isinstance(quantizer, DelayedScaleQuantizer):
        if holds_stack(quantizer):
            return jax.vmap(lambda q, a: q.update(a))(quantizer, amax)
        return quantizer.update(amax)
    return quantizer


def _dense_bwd(static: _Static, residuals, dy):
    cx, ck, q_arrays, grad_key = residuals
    qs = eqx.combine(q_arrays, static.quantizers)
    batch = static.batch
    kw = dict(key=grad_key, impl=static.impl, amax_axes=static.amax_axes)
    if static.has_bias:
        cg, dbias = quantize_dbias(dy, qs.grad, batch, **kw)
        dbias = dbias.astype(static.bias_dtype)
    else:
        cg, dbias = quantize(dy, qs.grad, batch, **kw), None
    k_ndim = static.n + dy.ndim - batch
    dx = gemm(
        cg, ck, (tuple(range(batch, dy.ndim)), tuple(range(static.n, k_ndim))),
        out_dtype=static.x_dtype,
    )
    dk = gemm(cx, cg, (tuple(range(batch)), tuple(range(batch))), out_dtype=static.kernel_dtype)
    following = DenseQuantizers(
        advance(qs.x, cx.amax), advance(qs.kernel, ck.amax), advance(qs.grad, cg.amax)
    )
    ct_quantizers = eqx.filter(following, eqx.is_array)
    return dx, dk, dbias, ct_quantizers, None


_dense_vjp.defvjp(_forward, _dense_bwd)


def _contracted(x, kernel, contracting_dims) -> int:
    """n, after checking that x contracts its trailing n dims and kernel its leading n."""
    fn = "dense"
    if not isinstance(contracting_dims, Sequence) or len(contracting_dims) != 2 or any(
        isinstance(d, int) or not isinstance(d, Sequence) for d in contracting_dims
    ):
        raise TypeError(
            f"{fn}: contracting_dims must be a pair (x_dims, kernel_dims) of int sequences, "
            f"e.g. ((-1,), (0,)), got {contracting_dims!r}."
        )
    xd, kd = (tuple(d % a.ndim if isinstance(d, int) else d for d in dims)
              for dims, a in zip(contracting_dims, (x, kernel)))
    n = len(xd)
    if n == 0 or xd != tuple(range(x.ndim - n, x.ndim)) or kd != tuple(range(n)):
        raise ValueError(
            f"{fn}: contracting_dims {tuple(map(tuple, contracting_dims))} must be x's trailing "
            f"n dims and kernel's leading n dims, in order (x {x.shape} @ kernel "
            f"{kernel.shape}), e.g. ((-1,), (0,)). Transpose the kernel to (K..., N...)."
        )
    if x.ndim == n or kernel.ndim == n:
        raise ValueError(
            f"{fn}: x {x.shape} needs at least one batch dim and kernel {kernel.shape} at "
            f"least one output dim besides the {n} contracted ones. Reshape x to (1, ...) or "
            "the kernel to (..., 1)."
        )
    if x.shape[x.ndim - n:] != kernel.shape[:n]:
        raise ValueError(
            f"{fn}: x's contracted dims {x.shape[x.ndim - n:]} differ from kernel's "
            f"{kernel.shape[:n]} (x {x.shape}, kernel {kernel.shape})."
        )
    return n


def check_operand_dtypes(fn: str, named) -> None:
    """Each (name, array) must be a float32/16 or bfloat16 jax.Array (a None bias is fine)."""
    for name, a in named:
        if name == "bias" and a is None:
            continue
        if not isinstance(a, jax.Array) or a.dtype.name not in ("float32", "float16", "bfloat16"):
            got = f"{type(a).__name__} of dtype {getattr(a, 'dtype', '?')}"
            raise TypeError(
                f"{fn}: {name} must be a float32, float16 or bfloat16 jax.Array, got {got}."
            )


def check_quantizer_set(fn: str, quantizers) -> None:
    """A DenseQuantizers of three quantizers; block formats with both copies."""
    if not isinstance(quantizers, DenseQuantizers):
        raise TypeError(
            f"{fn}: quantizers must be an eqx_quant.DenseQuantizers(x=..., kernel=..., grad=...),"
            f" got {type(quantizers).__name__}."
        )
    for role in _ROLES:
        q, where = getattr(quantizers, role), f"{fn} (quantizers.{role})"
        if not isinstance(q, AbstractQuantizer):
            raise TypeError(f"{where}: must be an eqx_quant quantizer, got {type(q).__name__}.")
        if isinstance(q, AbstractBlockQuantizer) and q.q_layout.name != "ROWWISE_COLWISE":
            raise ValueError(
                f"{where}: {type(q).__name__} has q_layout={q.q_layout.name}, but the layer "
                "reads both copies of every block-scaled operand (the blocks must run along "
                "each GEMM's contracted dims). Use QuantizeLayout.ROWWISE_COLWISE."
            )


def check_layer_key(fn: str, quantizers: DenseQuantizers, key) -> None:
    """`key` exactly when a quantizer of the layer rounds stochastically."""
    sr = roles_with_sr(quantizers)
    if sr and key is None:
        raise ValueError(
            f"{fn}: quantizers.{sr[0]} rounds stochastically and needs random bits: pass "
            "key=jax.random.key(seed), a new one per step."
        )
    if key is not None:
        if not sr:
            raise ValueError(
                f"{fn}: key was given but no quantizer rounds stochastically. Drop key."
            )
        key_words_of(fn, key)


def _check_dense(x, kernel, bias, quantizers, contracting_dims, key, amax_axes, impl) -> None:
    fn = "dense"
    check_operand_dtypes(fn, (("x", x), ("kernel", kernel), ("bias", bias)))
    check_quantizer_set(fn, quantizers)
    n = _contracted(x, kernel, contracting_dims)
    out_shape = kernel.shape[n:]
    if bias is not None and bias.shape != out_shape:
        raise ValueError(
            f"{fn}: bias must have the kernel's output shape {out_shape}, got {bias.shape}."
        )
    batch = x.ndim - n
    grad = jax.ShapeDtypeStruct(x.shape[:batch] + out_shape, x.dtype)
    for role, operand, fa in (("x", x, batch), ("kernel", kernel, n), ("grad", grad, batch)):
        q, where = getattr(quantizers, role), f"{fn} (quantizers.{role})"
        check_quantizer_state(where, q)
        if isinstance(q, AbstractBlockQuantizer):
            check_block_shape(where, operand, q, fa)
    check_layer_key(fn, quantizers, key)
    if impl not in ("auto", "ffi", "reference"):
        raise ValueError(f"{fn}: impl must be 'auto', 'ffi' or 'reference', got {impl!r}.")
    check_amax_axes(fn, amax_axes)


@validated_by(_check_dense)
@jaxtyped(typechecker=beartype)
def dense(
    x: HighPrecision[Array, "..."],
    kernel: HighPrecision[Array, "..."],
    bias: HighPrecision[Array, "..."] | None = None,
    *,
    quantizers: DenseQuantizers,
    contracting_dims: Sequence[Sequence[int]] = ((-1,), (0,)),
    key: PRNGKeyArray | None = None,
    amax_axes: Sequence[str] = (),
    impl: Impl = "auto",
) -> Shaped[Array, "..."]:
    """`x @ kernel + bias` with every GEMM, forward and backward, on quantized operands.

    **Arguments:**

    - `x`: the input, `(batch..., K...)`.
    - `kernel`: the weights, `(K..., N...)`.
    - `bias`: None, or an array of shape `N...`; its gradient is fused into the gradient's
      quantization (`quantize_dbias`).
    - `quantizers`: an `eqx_quant.DenseQuantizers` for x, the kernel and the output gradient.
    - `contracting_dims`: x's trailing dims and kernel's leading dims, in order; default
      `((-1,), (0,))`.
    - `key`: required when a quantizer rounds stochastically (each such quantizer gets
      `jax.random.fold_in(key, i)`, i = 0, 1, 2 for x, kernel, grad).
    - `amax_axes`, `impl`: as in `eqx_quant.quantize`, for all three quantizations (inside
      `shard_map`, name the axes whose devices must share each tensor's amax).

    **Returns:** `(batch..., N...)` in x's dtype.

    **Gradients:** `dx` and `dkernel` are GEMMs of the quantized output gradient with the
    kernel's and x's quantized copies from the forward pass; `dbias` is the float32 sum of the
    output gradient. The cotangent of `quantizers` is their next state: delayed-scaling
    quantizers advanced with the amaxes this call observed (x and kernel in the forward pass,
    the output gradient in the backward pass). Take `jax.grad` with respect to them and use
    the result at the next step; do not pass it to an optimizer. Use each `DenseQuantizers`
    in one `dense` call per step, and call `dense` on the whole batch (not under `jax.vmap`
    over examples): JAX sums the cotangents of an argument used several times.
    """
    n = _contracted(x, kernel, contracting_dims)
    q_arrays, q_static = eqx.partition(quantizers, eqx.is_array)
    bias_dtype = None if bias is None else bias.dtype.name
    static = _Static(
        n, x.ndim - n, q_static, bias is not None, impl, tuple(amax_axes), x.dtype.name,
        kernel.dtype.name, bias_dtype,
    )
    return _dense_vjp(static, x, kernel, bias, q_arrays, key)
