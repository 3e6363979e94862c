"""`gemm`: the product of two quantized tensors, as a GEMM consumes them.

A GEMM contracts one side of each operand's 2-D view (TE §9.1, §10): the trailing dims
`S[fa:]` are contracted from the rowwise copy, the leading dims `S[:fa]` from the colwise
(transposed) copy. For the block formats this is what makes the blocks run along the
contracted axis, so the copy is chosen by the contracting dims, never guessed.

- Per-tensor FP8: `dot_general(data_l, data_r, preferred_element_type=float32)` times
  `scale_inv_l * scale_inv_r`, as TE's JAX GEMM does without its kernel; XLA's GEMM
  rewriter sends FP8 dots to cuBLASLt's FP8 GEMM on Hopper (tests/test_cuda_gemm.py).
- MXFP8 / NVFP4: each operand's payload times its block scales, exact in bfloat16, goes into
  a bfloat16 GEMM with float32 sums, and NVFP4's two FP32 global scales multiply the product
  (`_block_operands`). Hopper has no block-scaled MMA; this is the product a block-scaled
  GEMM computes, up to the order of the float32 sums. A random Hadamard transform on both
  operands (one sign mask) cancels and is left in; a pair whose RHT does not cancel is
  dequantized to float32 (the RHT undone) and multiplied at HIGHEST precision.

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

from ._block_operands import global_scale, is_nvfp4, multiplies_in_bf16, unscaled_amax
from ._checks import validated_by
from ._enums import ScalingMode
from ._tensor import ScaledTensor, ScaledTensor1x, _dequantize_stored, _Meta

_OUT_DTYPES = ("float32", "bfloat16", "float16")


class _Operand(NamedTuple):
    """One operand's static description: its part's metadata, in float32 for the math."""

    meta: _Meta
    contracting: tuple[int, ...]  # in the stored layout
    free_order: tuple[int, ...]  # argsort of the free dims' original positions (stored order)


class _GemmSpec(NamedTuple):
    lhs: _Operand
    rhs: _Operand
    tensor_scaling: bool
    in_bf16: bool  # block formats: the forward product of exact bfloat16 values
    out_dtype: str


def _normalize_dims(fn: str, side: str, dims, ndim: int) -> tuple[int, ...]:
    if isinstance(dims, int) or not isinstance(dims, Sequence):
        raise TypeError(
            f"{fn}: contracting_dims must be a pair of sequences of ints, e.g. ((-1,), (0,)); "
            f"the {side} entry is {dims!r}."
        )
    out = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or not -ndim <= d < ndim:
            raise ValueError(
                f"{fn}: {side} contracting dim {d!r} is not an int in [-{ndim}, {ndim - 1}] "
                f"for a {side} operand of rank {ndim}."
            )
        out.append(d % ndim)
    if not out or len(set(out)) != len(out):
        raise ValueError(
            f"{fn}: the {side} contracting dims {tuple(dims)} must name at least one dim, "
            "each at most once."
        )
    if out != sorted(out):
        raise ValueError(
            f"{fn}: give the contracting dims of each side in increasing order (got {side} "
            f"{tuple(out)}); transpose before quantizing to pair them otherwise."
        )
    return tuple(out)


def _pick_part(fn: str, side: str, operand, dims: tuple[int, ...]) -> ScaledTensor1x:
    """The copy a GEMM reads for contracting `dims` (original positions, sorted)."""
    first = operand if isinstance(operand, ScaledTensor1x) else operand._first
    ndim, fa = first.ndim, first.flatten_axis
    trailing, leading = dims == tuple(range(fa, ndim)), dims == tuple(range(fa))
    want_colwise = leading and not trailing
    if isinstance(operand, ScaledTensor1x):
        part = operand
    else:
        wanted = operand.colwise if want_colwise else operand.rowwise
        part = wanted if wanted is not None else first
    if first.scaling_mode.is_tensor_scaling:
        return part  # both copies hold the same FP8 values; XLA places the transpose
    shape = first.original_shape
    if not (trailing or leading):
        raise ValueError(
            f"{fn}: {side} is {first.scaling_mode.name} with shape {shape} and flatten_axis "
            f"{fa}, whose 2-D view is {shape[:fa]} x {shape[fa:]}; a GEMM contracts one side "
            f"of it (dims {tuple(range(fa))} from the colwise copy, or "
            f"{tuple(range(fa, ndim))} from the rowwise copy), got dims {dims}. Quantize "
            f"with the flatten_axis that splits the contracted dims from the others."
        )
    if part.is_colwise != want_colwise:
        need, layout = ("colwise", "COLWISE") if want_colwise else ("rowwise", "ROWWISE")
        raise ValueError(
            f"{fn}: contracting {side} dims {dims} reads the {need} copy of a "
            f"{first.scaling_mode.name} tensor (its blocks run along those dims), but "
            f"{side} has no {need} copy. Quantize with a q_layout that includes "
            f"QuantizeLayout.{layout} (ROWWISE_COLWISE gives both)."
        )
    return part


def _stored_position(part: ScaledTensor1x, d: int) -> int:
    if part.data_layout == "N":
        return d
    fa = part.flatten_axis
    return d - fa if d >= fa else part.ndim - fa + d


def float32_meta(part: ScaledTensor1x) -> _Meta:
    """The part's dequantize metadata, with float32 (exact, unrounded) as the target."""
    return _Meta(
        part.scaling_mode,
        "float32",
        part.data_layout,
        part.flatten_axis,
        part.ndim,
        part.rht_sign_mask,
        part.is_colwise,
    )


def bf16_meta(meta: _Meta) -> _Meta:
    """Dequantize metadata for a bfloat16 GEMM (`_block_operands`): bfloat16 target, and the
    RHT left in (the pair's RHT cancels in the product)."""
    return meta._replace(dq_dtype="bfloat16", rht_sign_mask=None)


def _operand(part: ScaledTensor1x, dims: tuple[int, ...]) -> _Operand:
    meta = float32_meta(part)
    contracting = tuple(_stored_position(part, d) for d in dims)
    free = [d for d in range(part.ndim) if d not in dims]
    stored = sorted(free, key=lambda d: _stored_position(part, d))
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


def _family(mode: ScalingMode) -> str:
    """What a GEMM consumes: NVFP4 1x16 and 16x16 scales are both 1x16 scales to it."""
    if mode.is_tensor_scaling:
        return "per-tensor FP8"
    return "NVFP4" if mode.name.startswith("NVFP4") else mode.name


def _check_modes(fn: str, lhs, rhs, names: tuple[str, str] = ("lhs", "rhs")) -> bool:
    a, b = lhs.scaling_mode, rhs.scaling_mode
    if _family(a) != _family(b):
        raise ValueError(
            f"{fn}: {names[0]} is {a.name} and {names[1]} is {b.name}; a GEMM takes two "
            "per-tensor FP8 operands (delayed or current), two MXFP8 operands, or two NVFP4 "
            "operands (1D or 2D). Quantize both operands in one family."
        )
    return a.is_tensor_scaling


def _out_dtype(fn: str, lhs_dtype: str, out_dtype) -> str:
    name = lhs_dtype if out_dtype is None else jnp.dtype(out_dtype).name
    if name not in _OUT_DTYPES:
        raise ValueError(
            f"{fn}: out_dtype must be one of {_OUT_DTYPES} (None: lhs's original dtype), got "
            f"{name}."
        )
    return name


def _spec(lhs, rhs, contracting_dims, out_dtype):
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
    ld = _normalize_dims(fn, "lhs", contracting_dims[0], l_first.ndim)
    rd = _normalize_dims(fn, "rhs", contracting_dims[1], r_first.ndim)
    l_sizes = tuple(l_first.original_shape[d] for d in ld)
    r_sizes = tuple(r_first.original_shape[d] for d in rd)
    if l_sizes != r_sizes:
        raise ValueError(
            f"{fn}: the contracted sizes differ: lhs dims {ld} of shape "
            f"{l_first.original_shape} have sizes {l_sizes}, rhs dims {rd} of shape "
            f"{r_first.original_shape} have sizes {r_sizes}."
        )
    tensor_scaling = _check_modes(fn, l_first, r_first)
    lp = _pick_part(fn, "lhs", lhs, ld)
    rp = _pick_part(fn, "rhs", rhs, rd)
    out_dtype = _out_dtype(fn, lp.dq_dtype, out_dtype)
    in_bf16 = multiplies_in_bf16(lp.scaling_mode, lp.rht_sign_mask, rp.scaling_mode,
                                 rp.rht_sign_mask)
    spec = _GemmSpec(_operand(lp, ld), _operand(rp, rd), tensor_scaling, in_bf16, out_dtype)
    return spec, lp, rp


def _product(a, b, spec: _GemmSpec, precision) -> Array:
    """float32 product of two stored-layout operands, free dims in original order."""
    dims = ((spec.lhs.contracting, spec.rhs.contracting), ((), ()))
    y = jax.lax.dot_general(a, b, dims, precision=precision, preferred_element_type=jnp.float32)
    n_lhs = len(spec.lhs.free_order)
    order = spec.lhs.free_order + tuple(n_lhs + i for i in spec.rhs.free_order)
    return jnp.transpose(y, order)


def fp8_product(product):
    """`product(a, b, *rest)` of FP8 operands: as they are off CPU (FP8 tensor cores), and
    widened to bfloat16 on CPU, whose XLA dot has no FP8 path (it widens FP8 to float32
    itself; the products are the same and exact in float32 either way, and the bfloat16 dot
    runs 2x faster there, the ragged one 10x)."""

    def widened(a, b, *rest):
        return product(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), *rest)

    def run(a, b, *rest):
        return jax.lax.platform_dependent(a, b, *rest, cpu=widened, default=product)

    return run


def _dequantized(arrays, op: _Operand) -> Array:
    return _dequantize_stored(*arrays, op.meta)


def _bf16_values(arrays, op: _Operand) -> Array:
    """A block-format operand as exact bfloat16 values, NVFP4's global scale left out."""
    data, scale_inv, amax = arrays
    return _dequantize_stored(data, scale_inv, unscaled_amax(amax, op.meta.scaling_mode),
                              bf16_meta(op.meta))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _gemm_vjp(lhs_arrays, rhs_arrays, spec: _GemmSpec) -> Array:
    if spec.tensor_scaling:
        (ld, ls, _), (rd, rs, _) = lhs_arrays, rhs_arrays
        product = fp8_product(functools.partial(_product, spec=spec, precision=None))
        y = product(ld, rd) * (ls[0] * rs[0])
    elif spec.in_bf16:
        y = _product(_bf16_values(lhs_arrays, spec.lhs), _bf16_values(rhs_arrays, spec.rhs),
                     spec, None)  # bfloat16 products are exact in the float32 sums
        if is_nvfp4(spec.lhs.meta.scaling_mode):
            y = y * (global_scale(lhs_arrays[2])[0] * global_scale(rhs_arrays[2])[0])
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


def _check_gemm(lhs, rhs, contracting_dims, out_dtype) -> None:
    _spec(lhs, rhs, contracting_dims, out_dtype)


@validated_by(_check_gemm)
@jaxtyped(typechecker=beartype)
def gemm(
    lhs: ScaledTensor | ScaledTensor1x,
    rhs: ScaledTensor | ScaledTensor1x,
    contracting_dims: Sequence[Sequence[int]] = ((-1,), (0,)),
    *,
    out_dtype: jax.typing.DTypeLike | None = None,
) -> Shaped[Array, "..."]:
    """The product of two quantized tensors, contracting `contracting_dims`.

    **Arguments:**

    - `lhs`, `rhs`: results of `eqx_quant.quantize` (a `ScaledTensor`, or one of its parts).
      Both per-tensor FP8 (delayed or current, E4M3 or E5M2), both MXFP8, or both NVFP4
      (1D or 2D scales, e.g. 2D for weights as in TE's recipe).
    - `contracting_dims`: `(lhs_dims, rhs_dims)` in the operands' original shapes, paired in
      order as in `jax.lax.dot_general`; default `((-1,), (0,))`, i.e. `lhs @ rhs`. For the
      block formats they must be one side of the operand's 2-D view: its trailing dims
      `S[flatten_axis:]` (read from the rowwise copy) or its leading dims `S[:flatten_axis]`
      (read from the colwise copy). Per-tensor FP8 may contract any dims.
    - `out_dtype`: float32, bfloat16 or float16; default lhs's original dtype.

    **Returns:** an array of shape `lhs free dims + rhs free dims`, each in original order.

    Works under `jit`, `vmap` (one example per call), `grad` (straight-through), sharded
    `jit` and `shard_map`.
    """
    spec, lp, rp = _spec(lhs, rhs, contracting_dims, out_dtype)
    return _gemm_vjp((lp.data, lp.scale_inv, lp.amax), (rp.data, rp.scale_inv, rp.amax), spec)
