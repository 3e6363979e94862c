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

from .._core import (
    HighPrecision,
    cotangent_for,
    explicit_sharding,
    union_axes,
    validated_by,
    vary_like,
    varying_axes,
)
from .._gemm import check_modes, gemm
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
    n: int  # contracted dims: x's trailing n, and the kernel's leading (or trailing) n
    batch: int  # x's other dims, the leading dims of y and dy
    kernel_last: bool  # the kernel is (N..., K...) (Equinox's (out, in)), not (K..., N...)
    out_shape: tuple[int, ...]  # the kernel's output dims (N...)
    manual: tuple[tuple[str, ...], ...]  # in shard_map: axes x, kernel, bias, state vary over
    shardings: tuple  # Explicit axes: x's, kernel's, the output's, bias' sharding, else None
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


def _kernel_dims(static: _Static, k_ndim: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The kernel's contracted dims and its output dims."""
    n = static.n
    if static.kernel_last:
        return tuple(range(k_ndim - n, k_ndim)), tuple(range(k_ndim - n))
    return tuple(range(n)), tuple(range(n, k_ndim))


def _k_ndim(static: _Static) -> int:
    return static.n + len(static.out_shape)


def quantize_operands(static: _Static, x, kernel, qs: DenseQuantizers, keys):
    """The forward quantizations: x as (batch, K), the kernel with its K dims as one axis."""
    n, kw = static.n, dict(impl=static.impl, amax_axes=static.amax_axes)
    cx = quantize(x, qs.x, x.ndim - n, key=keys["x"], **kw)
    ck = quantize(kernel, qs.kernel, kernel.ndim - n if static.kernel_last else n,
                  key=keys["kernel"], **kw)
    return cx, ck


def forward_product(static: _Static, cx, ck, bias, out_dtype):
    """`x @ kernel + bias` from the quantized copies."""
    n, x_ndim = static.n, static.batch + static.n
    dims = (tuple(range(x_ndim - n, x_ndim)), _kernel_dims(static, _k_ndim(static))[0])
    y = gemm(cx, ck, dims, out_dtype=jnp.float32, out_sharding=static.shardings[2])
    if static.has_bias:
        y = y + bias.astype(jnp.float32).reshape((1,) * static.batch + bias.shape)
    return y.astype(out_dtype)


def _forward(static: _Static, x, kernel, bias, q_arrays, key):
    qs = eqx.combine(q_arrays, static.quantizers)
    keys = key_for_roles(key, qs)
    cx, ck = quantize_operands(static, x, kernel, qs, keys)
    y = forward_product(static, cx, ck, bias, x.dtype)
    return y, (cx, ck, q_arrays, keys["grad"])


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


def observed_cotangent(receivers, amaxes: DenseQuantizers):
    """The cotangent of a layer's receivers: `[amax, 1]` for each role that has one (the 1
    counts the calls, so that a receiver used twice can be told apart)."""

    def one(receiver, amax):
        if receiver is None:
            return None
        amax = jnp.asarray(amax, jnp.float32).reshape(receiver.shape[:-1])
        observed = jnp.stack([amax, jnp.ones_like(amax)], axis=-1)
        return cotangent_for(observed, varying_axes(receiver), reduce="max")

    return DenseQuantizers(*(one(getattr(receivers, r), getattr(amaxes, r)) for r in _ROLES))


def backward_products(static: _Static, cx, ck, qs: DenseQuantizers, grad_key, dy):
    """dx, dkernel, dbias, the three observed amaxes and dy's quantized copies, from the
    forward copies and dy."""
    batch = static.batch
    kw = dict(key=grad_key, impl=static.impl, amax_axes=static.amax_axes)
    if static.has_bias:
        cg, dbias = quantize_dbias(dy, qs.grad, batch, **kw)
        dbias = dbias.astype(static.bias_dtype)
    else:
        cg, dbias = quantize(dy, qs.grad, batch, **kw), None
    kernel_out = _kernel_dims(static, _k_ndim(static))[1]
    x_sharding, k_sharding, _, b_sharding = static.shardings
    dy_sharding = explicit_sharding(dy)
    if dy_sharding is not None:
        # Weights made outside the mesh are replicated on it: so are their gradients.
        replicated = jax.sharding.NamedSharding(dy_sharding.mesh, jax.sharding.PartitionSpec())
        k_sharding = replicated if k_sharding is None else k_sharding
        b_sharding = replicated if b_sharding is None and static.has_bias else b_sharding
    dx = gemm(cg, ck, (tuple(range(batch, dy.ndim)), kernel_out), out_dtype=static.x_dtype,
              out_sharding=x_sharding)
    # On Explicit axes the weight gradient contracts the (sharded) batch: its sharding is the
    # kernel's, and JAX reduces the per-device products into it.
    batch_dims = (tuple(range(batch)), tuple(range(batch)))
    if static.kernel_last:
        dk = gemm(cg, cx, batch_dims, out_dtype=static.kernel_dtype, out_sharding=k_sharding)
    else:
        dk = gemm(cx, cg, batch_dims, out_dtype=static.kernel_dtype, out_sharding=k_sharding)
    dx, dk, dbias, amaxes = reduce_to_primals(
        static.manual, (dx, dk, dbias), (cx.amax, ck.amax, cg.amax)
    )
    if b_sharding is not None and dbias is not None:  # Explicit axes: typed like the bias
        dbias = jax.sharding.reshard(dbias, b_sharding)
    return dx, dk, dbias, amaxes, cg


def reduce_to_primals(manual, grads, amaxes):
    """Inside shard_map: the gradients of values every device holds (x, kernel, bias; `manual`
    gives the axes each varies over, then the state's) summed over the axes the data is split
    along (JAX's transpose of using them on every device), and the amaxes that advance the
    state maxed, so that every device's next state is the global one. Returns
    `(*grads, DenseQuantizers(*amaxes))`."""
    *grad_axes, state_axes = manual
    reduced = (cotangent_for(g, axes) for g, axes in zip(grads, grad_axes, strict=True))
    maxed = DenseQuantizers(*(cotangent_for(a, state_axes, reduce="max") for a in amaxes))
    return (*reduced, maxed)


def state_zeros(q_arrays):
    """Zero cotangents for the quantizers' arrays, typed like them inside shard_map."""
    return jax.tree.map(lambda a: vary_like(jnp.zeros_like(a), varying_axes(a)), q_arrays)


def next_state(qs: DenseQuantizers, amaxes: DenseQuantizers):
    """The quantizers' arrays after the amaxes this call observed (their cotangent in `dense`
    and `grouped_dense`)."""
    following = DenseQuantizers(*(advance(getattr(qs, r), getattr(amaxes, r)) for r in _ROLES))
    return eqx.filter(following, eqx.is_array)


def _dense_bwd(static: _Static, residuals, dy):
    cx, ck, q_arrays, grad_key = residuals
    qs = eqx.combine(q_arrays, static.quantizers)
    dx, dk, dbias, amaxes, _ = backward_products(static, cx, ck, qs, grad_key, dy)
    return dx, dk, dbias, next_state(qs, amaxes), None


_dense_vjp.defvjp(_forward, _dense_bwd)


def contracted(fn: str, x, kernel, contracting_dims) -> tuple[int, bool]:
    """(n, kernel_last), after checking that x contracts its trailing n dims and the kernel its
    leading n dims (`(K..., N...)`) or its trailing n dims (`(N..., K...)`, Equinox's
    `(out, in)` weight)."""
    if not isinstance(contracting_dims, Sequence) or len(contracting_dims) != 2 or any(
        isinstance(d, int) or not isinstance(d, Sequence) for d in contracting_dims
    ):
        raise TypeError(
            f"{fn}: contracting_dims must be a pair (x_dims, kernel_dims) of int sequences, "
            f"e.g. ((-1,), (0,)) for a (K, N) kernel or ((-1,), (1,)) for an (N, K) one, got "
            f"{contracting_dims!r}."
        )
    xd, kd = (tuple(d % a.ndim if isinstance(d, int) else d for d in dims)
              for dims, a in zip(contracting_dims, (x, kernel)))
    n = len(xd)
    trailing = tuple(range(kernel.ndim - n, kernel.ndim))
    if n == 0 or xd != tuple(range(x.ndim - n, x.ndim)) or kd not in (tuple(range(n)), trailing):
        raise ValueError(
            f"{fn}: contracting_dims {tuple(map(tuple, contracting_dims))} must be x's trailing "
            f"n dims and the kernel's leading or trailing n dims, in order (x {x.shape} @ "
            f"kernel {kernel.shape}): ((-1,), (0,)) for a (K, N) kernel, ((-1,), (1,)) for an "
            "(N, K) one."
        )
    kernel_last = n < kernel.ndim and kd == trailing and kd != tuple(range(n))
    if x.ndim == n or kernel.ndim == n:
        raise ValueError(
            f"{fn}: x {x.shape} needs at least one batch dim and kernel {kernel.shape} at "
            f"least one output dim besides the {n} contracted ones. Reshape x to (1, ...) or "
            "the kernel to (..., 1)."
        )
    k_contracted = kernel.shape[kernel.ndim - n:] if kernel_last else kernel.shape[:n]
    if x.shape[x.ndim - n:] != k_contracted:
        raise ValueError(
            f"{fn}: x's contracted dims {x.shape[x.ndim - n:]} differ from kernel's "
            f"{k_contracted} (x {x.shape}, kernel {kernel.shape}, contracting_dims "
            f"{tuple(map(tuple, contracting_dims))})."
        )
    return n, kernel_last


def check_operand_dtypes(fn: str, named) -> None:
    """Each (name, array) must be a float32/16 or bfloat16 jax.Array (a None bias is fine)."""
    for name, a in named:
        if name == "bias" and a is None:
            continue
        floats = ("float32", "float16", "bfloat16")
        if not isinstance(a, jax.Array | jax.ShapeDtypeStruct) or a.dtype.name not in floats:
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


def check_families(fn: str, quantizers: DenseQuantizers) -> None:
    """The three operands meet in the three GEMMs (x.kernel, grad.kernel, x.grad): one GEMM
    family (checked after each role's own checks, whose messages are more specific)."""
    for a, b in (("x", "kernel"), ("grad", "kernel")):
        check_modes(fn, getattr(quantizers, a), getattr(quantizers, b),
                    (f"quantizers.{a}", f"quantizers.{b}"))


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


def check_dense(x, kernel, bias, quantizers, contracting_dims, key, amax_axes, impl,
                out_sharding=None) -> None:
    fn = "dense"
    check_operand_dtypes(fn, (("x", x), ("kernel", kernel), ("bias", bias)))
    check_quantizer_set(fn, quantizers)
    n, kernel_last = contracted(fn, x, kernel, contracting_dims)
    out_shape = kernel.shape[: kernel.ndim - n] if kernel_last else kernel.shape[n:]
    if bias is not None and bias.shape != out_shape:
        raise ValueError(
            f"{fn}: bias must have the kernel's output shape {out_shape}, got {bias.shape}."
        )
    batch = x.ndim - n
    grad = jax.ShapeDtypeStruct(x.shape[:batch] + out_shape, x.dtype)
    k_fa = kernel.ndim - n if kernel_last else n
    for role, operand, fa in (("x", x, batch), ("kernel", kernel, k_fa), ("grad", grad, batch)):
        q, where = getattr(quantizers, role), f"{fn} (quantizers.{role})"
        check_quantizer_state(where, q)
        if isinstance(q, AbstractBlockQuantizer):
            check_block_shape(where, operand, q, fa)
    check_layer_key(fn, quantizers, key)
    if impl not in ("auto", "ffi", "reference"):
        raise ValueError(f"{fn}: impl must be 'auto', 'ffi' or 'reference', got {impl!r}.")
    check_amax_axes(fn, amax_axes)
    check_families(fn, quantizers)


@validated_by(check_dense)
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
    out_sharding: jax.sharding.NamedSharding | jax.sharding.PartitionSpec | None = None,
) -> Shaped[Array, "..."]:
    """`x @ kernel + bias` with every GEMM, forward and backward, on quantized operands.

    **Arguments:**

    - `x`: the input, `(batch..., K...)`.
    - `kernel`: the weights, `(K..., N...)`, or `(N..., K...)` (Equinox's `(out, in)`
      layout) with `contracting_dims=((-1,), (-1,))`. For per-tensor scaling the layout
      only decides which quantized copy each GEMM reads.
    - `bias`: None, or an array of shape `N...`; its gradient is fused into the gradient's
      quantization (`quantize_dbias`).
    - `quantizers`: an `eqx_quant.DenseQuantizers` for x, the kernel and the output gradient.
    - `contracting_dims`: x's trailing dims and the kernel's leading (or trailing) dims, in
      order; default `((-1,), (0,))`.
    - `key`: required when a quantizer rounds stochastically (each such quantizer gets
      `jax.random.fold_in(key, i)`, i = 0, 1, 2 for x, kernel, grad).
    - `amax_axes`, `impl`: as in `eqx_quant.quantize`, for all three quantizations (inside
      `shard_map`, name the axes whose devices must share each tensor's amax).
    - `out_sharding`: the output's sharding, as in `jnp.dot` (e.g. `P("data", None)` for a
      row-parallel layer on Explicit axes, where the contracted dims are sharded). The
      gradients take x's and the kernel's shardings.

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
    n, kernel_last = contracted("dense", x, kernel, contracting_dims)
    q_arrays, q_static = eqx.partition(quantizers, eqx.is_array)
    static = make_static(x, kernel, bias, n, kernel_last, q_static, impl, amax_axes, q_arrays,
                         out_sharding)
    return _dense_vjp(static, x, kernel, bias, q_arrays, key)


def make_static(x, kernel, bias, n, kernel_last, q_static, impl, amax_axes, state=None,
                out_sharding=None) -> _Static:
    bias_dtype = None if bias is None else bias.dtype.name
    manual = tuple(union_axes(v) for v in (x, kernel, bias, state))
    bias_sharding = None if bias is None else explicit_sharding(bias)
    shardings = (explicit_sharding(x), explicit_sharding(kernel), out_sharding, bias_sharding)
    out_shape = kernel.shape[: kernel.ndim - n] if kernel_last else kernel.shape[n:]
    return _Static(
        n, x.ndim - n, kernel_last, tuple(out_shape), manual, shardings, q_static,
        bias is not None, impl,
        tuple(amax_axes), x.dtype.name, kernel.dtype.name, bias_dtype,
    )
