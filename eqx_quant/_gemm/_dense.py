"""`gemm`: the product of two quantized tensors, as a GEMM consumes them.

A GEMM contracts one side of each operand's 2-D view (as TE's GEMM does): the trailing dims
`S[fa:]` are contracted from the rowwise copy, the leading dims `S[:fa]` from the colwise
(transposed) copy. For the block formats this is what makes the blocks run along the
contracted axis, so the copy is chosen by the contracting dims, never guessed.

- Per-tensor FP8: `dot_general(data_l, data_r, preferred_element_type=float32)` times
  `scale_inv_l * scale_inv_r`, as TE's JAX GEMM does without its kernel; XLA's GEMM
  rewriter sends FP8 dots to cuBLASLt's FP8 GEMM on Hopper (tests/cuda/test_cuda_gemm.py).
- MXFP8 / NVFP4: each operand's payload times its block scales, exact in bfloat16, goes into
  a bfloat16 GEMM with float32 sums, and NVFP4's two FP32 global scales multiply the product
  (`_operands.py`). Hopper has no block-scaled MMA; this is the product a block-scaled
  GEMM computes, up to the order of the float32 sums. A random Hadamard transform on both
  operands (one sign mask) cancels and is left in; a pair whose RHT does not cancel is
  dequantized to float32 (the RHT undone) and multiplied at HIGHEST precision.
- FP8 block scaling (1x128 / 128x128): two E4M3 operands go to the block-scaled GEMM op
  (`_ops/fp8_block_gemm.py`: CUTLASS on CUDA), whose 2-D views are the parts' stored
  layouts with the contraction trailing; other pairs are dequantized to float32 and
  multiplied at HIGHEST precision (docs/block_formats.md).

The gradient is the straight-through one: the cotangent of each operand's `data` is the
gradient of the product of the dequantized operands (float32, dequantized units, stored
layout), so `jax.grad` through `gemm(quantize(a, qa), quantize(b, qb))` is the gradient of
the float product at the dequantized values.
"""

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Shaped, jaxtyped

from .._core import validated_by
from .._tensor import PartMeta, ScaledTensor, ScaledTensor1x, dequantize_stored
from ._operands import (
    bf16_meta,
    check_modes,
    exact_value_amax,
    float32_meta,
    fp8_product,
    multiplies_in_bf16,
    normalize_dims,
    out_dtype_name,
    pick_part,
    product_factor,
    scaled_gemm,
    scaled_gemm_views,
    stored_position,
)


class _Operand(NamedTuple):
    """One operand's static description: its part's metadata, in float32 for the math."""

    meta: PartMeta
    contracting: tuple[int, ...]  # in the stored layout
    free_order: tuple[int, ...]  # argsort of the free dims' original positions (stored order)


class _GemmSpec(NamedTuple):
    lhs: _Operand
    rhs: _Operand
    on_payloads: bool  # per-tensor FP8: the product of the stored payloads
    in_bf16: bool  # block formats: the forward product of exact bfloat16 values
    scaled: tuple | None  # FP8 block: the operands' 2-D views for the block-scaled GEMM
    out_dtype: str
    out_sharding: jax.sharding.NamedSharding | jax.sharding.PartitionSpec | None


def _operand(part: ScaledTensor1x, dims: tuple[int, ...]) -> _Operand:
    meta = float32_meta(part)
    contracting = tuple(stored_position(part, d) for d in dims)
    free = [d for d in range(part.ndim) if d not in dims]
    stored = sorted(free, key=lambda d: stored_position(part, d))
    return _Operand(meta, contracting, tuple(stored.index(d) for d in free))


def _check_operand(fn: str, side: str, operand) -> None:
    if not isinstance(operand, (ScaledTensor, ScaledTensor1x)):
        raise TypeError(
            f"{fn}: {side} must be a ScaledTensor or ScaledTensor1x (the result of "
            f"eqx_quant.quantize), got {type(operand).__name__}. Quantize it first; for "
            "unquantized operands use jax.lax.dot_general."
        )
    part = operand if isinstance(operand, ScaledTensor1x) else operand._first
    if part.data.ndim != part.ndim:
        raise ValueError(
            f"{fn}: {side} carries {part.data.ndim - part.ndim} leading vmapped dims (a batch "
            f"of quantized tensors); call gemm inside jax.vmap, one example at a time."
        )


def _spec(lhs, rhs, contracting_dims, out_dtype, out_sharding=None):
    """The static spec of one call and the two parts it reads (every check is here)."""
    fn = "gemm"
    _check_operand(fn, "lhs", lhs)
    _check_operand(fn, "rhs", rhs)
    if not isinstance(contracting_dims, Sequence) or len(contracting_dims) != 2:
        raise TypeError(
            f"{fn}: contracting_dims must be a pair (lhs_dims, rhs_dims), e.g. ((-1,), (0,)), "
            f"got {contracting_dims!r}."
        )
    l_first = lhs if isinstance(lhs, ScaledTensor1x) else lhs._first
    r_first = rhs if isinstance(rhs, ScaledTensor1x) else rhs._first
    ld = normalize_dims(fn, "lhs", contracting_dims[0], l_first.ndim)
    rd = normalize_dims(fn, "rhs", contracting_dims[1], r_first.ndim)
    l_sizes = tuple(l_first.original_shape[d] for d in ld)
    r_sizes = tuple(r_first.original_shape[d] for d in rd)
    if l_sizes != r_sizes:
        raise ValueError(
            f"{fn}: the contracted sizes differ: lhs dims {ld} of shape "
            f"{l_first.original_shape} have sizes {l_sizes}, rhs dims {rd} of shape "
            f"{r_first.original_shape} have sizes {r_sizes}."
        )
    on_payloads = check_modes(fn, l_first, r_first)
    lp = pick_part(fn, "lhs", lhs, ld)
    rp = pick_part(fn, "rhs", rhs, rd)
    out_dtype = out_dtype_name(fn, lp.dq_dtype, out_dtype)
    in_bf16 = multiplies_in_bf16(lp.scaling_mode, lp.rht_sign_mask, rp.scaling_mode,
                                 rp.rht_sign_mask)
    if out_sharding is not None and not isinstance(
        out_sharding, jax.sharding.NamedSharding | jax.sharding.PartitionSpec
    ):
        raise TypeError(
            f"{fn}: out_sharding must be a jax.sharding.NamedSharding or PartitionSpec (as in "
            f"jnp.dot), got {type(out_sharding).__name__}."
        )
    scaled = scaled_gemm_views(lp, ld, rp, rd)
    spec = _GemmSpec(_operand(lp, ld), _operand(rp, rd), on_payloads, in_bf16, scaled,
                     out_dtype, out_sharding)
    return spec, lp, rp


def _stored_out_sharding(spec: _GemmSpec):
    """`out_sharding` (in the result's order) for dot_general's output, whose free dims come
    in the operands' stored order."""
    out = spec.out_sharding
    if out is None:
        return None
    n_lhs = len(spec.lhs.free_order)
    order = spec.lhs.free_order + tuple(n_lhs + i for i in spec.rhs.free_order)
    pspec = out.spec if isinstance(out, jax.sharding.NamedSharding) else out
    entries = tuple(pspec) + (None,) * (len(order) - len(pspec))
    stored = [None] * len(order)
    for j, i in enumerate(order):
        stored[i] = entries[j]
    stored_spec = jax.sharding.PartitionSpec(*stored)
    if isinstance(out, jax.sharding.NamedSharding):
        return jax.sharding.NamedSharding(out.mesh, stored_spec)
    return stored_spec


def _product(a, b, spec: _GemmSpec, precision) -> Array:
    """float32 product of two stored-layout operands, free dims in original order."""
    dims = ((spec.lhs.contracting, spec.rhs.contracting), ((), ()))
    y = jax.lax.dot_general(a, b, dims, precision=precision, preferred_element_type=jnp.float32,
                            out_sharding=_stored_out_sharding(spec))
    n_lhs = len(spec.lhs.free_order)
    order = spec.lhs.free_order + tuple(n_lhs + i for i in spec.rhs.free_order)
    return jnp.transpose(y, order)


def _scaled_product(lhs_arrays, rhs_arrays, spec: _GemmSpec) -> Array:
    """The block-scaled GEMM of the operands' 2-D views, free dims in original order."""
    lv, rv = spec.scaled
    a, b = lhs_arrays[0], rhs_arrays[0]
    l_free = a.shape[: a.ndim - len(spec.lhs.contracting)]
    r_free = b.shape[: b.ndim - len(spec.rhs.contracting)]
    y = scaled_gemm(spec.scaled, a.reshape(lv.rows, lv.k), lhs_arrays[1],
                    b.reshape(rv.rows, rv.k), rhs_arrays[1], jnp.dtype(spec.out_dtype).name)
    y = y.reshape(l_free + r_free)
    n_lhs = len(spec.lhs.free_order)
    y = jnp.transpose(y, spec.lhs.free_order + tuple(n_lhs + i for i in spec.rhs.free_order))
    if spec.out_sharding is not None:
        y = jax.sharding.reshard(y, spec.out_sharding)
    return y


def _dequantized(arrays, op: _Operand) -> Array:
    return dequantize_stored(*arrays, op.meta)


def _bf16_values(arrays, op: _Operand) -> Array:
    """A block-format operand as exact bfloat16 values, any global scale left out."""
    data, scale_inv, amax = arrays
    amax = exact_value_amax(op.meta.scaling_mode, amax)
    return dequantize_stored(data, scale_inv, amax, bf16_meta(op.meta))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _gemm_vjp(lhs_arrays, rhs_arrays, spec: _GemmSpec) -> Array:
    if spec.scaled is not None:
        y = _scaled_product(lhs_arrays, rhs_arrays, spec)
    elif spec.on_payloads or spec.in_bf16:
        if spec.on_payloads:
            a, b = lhs_arrays[0], rhs_arrays[0]
            product = fp8_product(functools.partial(_product, spec=spec, precision=None))
        else:  # bfloat16 products are exact in the float32 sums
            a, b = _bf16_values(lhs_arrays, spec.lhs), _bf16_values(rhs_arrays, spec.rhs)
            product = functools.partial(_product, spec=spec, precision=None)
        y = product(a, b)
        lf = product_factor(spec.lhs.meta.scaling_mode, lhs_arrays)
        rf = product_factor(spec.rhs.meta.scaling_mode, rhs_arrays)
        if lf is not None:
            y = y * (lf[0] * rf[0])
    else:
        a = _dequantized(lhs_arrays, spec.lhs)
        b = _dequantized(rhs_arrays, spec.rhs)
        y = _product(a, b, spec, jax.lax.Precision.HIGHEST)
    return y.astype(spec.out_dtype)


def _gemm_fwd(lhs_arrays, rhs_arrays, spec):
    return _gemm_vjp(lhs_arrays, rhs_arrays, spec), (lhs_arrays, rhs_arrays)


def _gemm_bwd(spec, residuals, ct):
    lhs_arrays, rhs_arrays = residuals
    a = _dequantized(lhs_arrays, spec.lhs)
    b = _dequantized(rhs_arrays, spec.rhs)
    product = functools.partial(_product, spec=spec, precision=jax.lax.Precision.HIGHEST)
    _, pullback = jax.vjp(product, a, b)
    ct_a, ct_b = pullback(ct.astype(jnp.float32))

    def cotangent(arrays, ct_data):
        _, scale_inv, amax = arrays
        return ct_data, jnp.zeros_like(scale_inv), jnp.zeros_like(amax)

    return cotangent(lhs_arrays, ct_a), cotangent(rhs_arrays, ct_b)


_gemm_vjp.defvjp(_gemm_fwd, _gemm_bwd)


def _check_gemm(lhs, rhs, contracting_dims, out_dtype, out_sharding) -> None:
    _spec(lhs, rhs, contracting_dims, out_dtype, out_sharding)


@validated_by(_check_gemm)
@jaxtyped(typechecker=beartype)
def gemm(
    lhs: ScaledTensor | ScaledTensor1x,
    rhs: ScaledTensor | ScaledTensor1x,
    contracting_dims: Sequence[Sequence[int]] = ((-1,), (0,)),
    *,
    out_dtype: jax.typing.DTypeLike | None = None,
    out_sharding: jax.sharding.NamedSharding | jax.sharding.PartitionSpec | None = None,
) -> Shaped[Array, "..."]:
    """The product of two quantized tensors, contracting `contracting_dims`.

    **Arguments:**

    - `lhs`, `rhs`: results of `eqx_quant.quantize` (a `ScaledTensor`, or one of its parts).
      Both per-tensor FP8 (delayed or current, E4M3 or E5M2), both MXFP8, both NVFP4
      (1D or 2D scales, e.g. 2D for weights as in TE's recipe), or both FP8 block-scaled
      (1x128 or 128x128).
    - `contracting_dims`: `(lhs_dims, rhs_dims)` in the operands' original shapes, paired in
      order as in `jax.lax.dot_general`; default `((-1,), (0,))`, i.e. `lhs @ rhs`. For the
      block formats they must be one side of the operand's 2-D view: its trailing dims
      `S[flatten_axis:]` (read from the rowwise copy) or its leading dims `S[:flatten_axis]`
      (read from the colwise copy). Per-tensor FP8 may contract any dims.
    - `out_dtype`: float32, bfloat16 or float16; default lhs's original dtype.
    - `out_sharding`: the result's sharding, as in `jnp.dot` (a `NamedSharding`, or a
      `PartitionSpec` under `jax.set_mesh`). Needed on Explicit mesh axes when the
      contracted dims are sharded (e.g. a weight gradient over a batch split by data
      parallelism: `P()` all-reduces the product).

    **Returns:** an array of shape `lhs free dims + rhs free dims`, each in original order.

    Works under `jit`, `vmap` (one example per call), `grad` (straight-through), sharded
    `jit` and `shard_map`.
    """
    spec, lp, rp = _spec(lhs, rhs, contracting_dims, out_dtype, out_sharding)
    return _gemm_vjp((lp.data, lp.scale_inv, lp.amax), (rp.data, rp.scale_inv, rp.amax), spec)
