"""`grouped_gemm`: the MoE expert GEMM, ragged token groups times one weight per group.

`lhs` is a grouped token matrix `(M, K)` (rows of group g are multiplied by expert g's
weights), `rhs` a stack of G quantized weights, one `quantize` per expert (e.g. built with
`jax.vmap`). Row m of group g of the result is `lhs[m] @ rhs[g]`; rows past the last group
are 0. The arithmetic is `gemm`'s: per-tensor FP8 as an FP8 `jax.lax.ragged_dot` times each
row's `scale_inv_lhs[g] * scale_inv_rhs[g]`; MXFP8 and NVFP4 as exact bfloat16 values with
float32 sums (NVFP4: each row's product times its group's two global scales;
`_operands.py`); FP8 block scaling, whose values bfloat16 does not hold, as dequantized
float32 values at HIGHEST precision.

A format may multiply a pair on a grouped block-scaled GEMM of the stored parts instead
(`AbstractFormat.grouped_scaled_gemm`): FP8 block scaling's E4M3 1x128 tokens times E4M3
experts go to `eqx_quant_grouped_fp8_block_gemm` (CUTLASS) on the platforms where that op
runs its kernel by default, which none does until its GPU test has passed
(`KERNEL_BY_DEFAULT`); the choice is made per platform when the program is lowered, so the
CPU keeps the float32 product. `forced_grouped_gemm` takes the GEMM everywhere, for tests.
The gradient is straight-through, as for `gemm`, and always the float32 one.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from beartype import beartype
from jaxtyping import Array, Shaped, jaxtyped

from .._core import explicit_sharding, validated_by
from .._tensor import (
    GroupedLayout,
    GroupedScaledTensor,
    GroupedScaledTensor1x,
    PartMeta,
    ScaledTensor,
    ScaledTensor1x,
    dequantize_grouped,
    dequantize_stored,
    stored_cotangent,
)
from ._operands import (
    bf16_meta,
    check_modes,
    exact_value_amax,
    float32_meta,
    fp8_product,
    grouped_bf16_rows,
    grouped_scaled_gemm,
    multiplies_in_bf16,
    out_dtype_name,
    pick_part,
    product_factor,
    stored_position,
)
from ._ragged import (
    group_counts,
    grouped_rows,
    kernel_fits,
    outer_per_group,
    row_group,
    rows_times_groups,
)


class _Spec(NamedTuple):
    lhs: GroupedLayout  # float32 dequantize target
    rhs: PartMeta  # one expert's part, float32 dequantize target
    in_bf16: bool  # block formats: the forward product of exact bfloat16 values
    rhs_transposed: bool  # the expert's stored data is (N, K)
    on_payloads: bool  # per-tensor FP8: the product of the stored payloads
    out_dtype: str
    # The grouped block-scaled GEMM's impl, forced (tests); None: where its kernel is on.
    scaled_impl: str | None = None


def _lhs_part(fn: str, lhs) -> GroupedScaledTensor1x:
    if not isinstance(lhs, (GroupedScaledTensor, GroupedScaledTensor1x)):
        raise TypeError(
            f"{fn}: lhs must be a GroupedScaledTensor (the result of eqx_quant.grouped_quantize "
            f"of the (tokens, K) matrix), got {type(lhs).__name__}."
        )
    part = lhs.rowwise if isinstance(lhs, GroupedScaledTensor) else lhs
    if part is None or part.is_colwise:
        raise ValueError(
            f"{fn}: lhs has no rowwise copy; the expert GEMM contracts the tokens' K dim, which "
            "the rowwise copy holds. Quantize with QuantizeLayout.ROWWISE or ROWWISE_COLWISE."
        )
    check_token_matrix_part(fn, "lhs", part, "(tokens, K)")
    return part


def check_token_matrix_part(fn: str, name: str, part, what: str) -> None:
    """One grouped problem (no vmapped batch) of a 2-D token matrix."""
    if part.group_sizes.ndim != 1:
        raise ValueError(
            f"{fn}: {name} holds a batch of grouped problems (group_sizes of shape "
            f"{part.group_sizes.shape}); call {fn} inside jax.vmap."
        )
    if len(part.original_shape) != 2:
        raise ValueError(
            f"{fn}: {name} must be a {what} matrix, got shape {part.original_shape}. Reshape "
            f"it to {what} before grouped_quantize."
        )


def part_cotangent(arrays, ct_rows, layout: GroupedLayout):
    """The cotangent of a grouped part's (data, scale_inv, amax, group_sizes) for a float32
    cotangent of its (M, N) rows: the rows in the stored layout, zeros, and float0 sizes."""
    _, scale_inv, amax, sizes = arrays
    ct_data = stored_cotangent(ct_rows, sizes, layout)
    zeros = np.zeros(sizes.shape, jax.dtypes.float0)
    return ct_data, jnp.zeros_like(scale_inv), jnp.zeros_like(amax), zeros


def _rhs_first(fn: str, rhs, groups: int) -> ScaledTensor1x:
    if not isinstance(rhs, (ScaledTensor, ScaledTensor1x)):
        raise TypeError(
            f"{fn}: rhs must be a ScaledTensor holding one quantized weight per group, e.g. "
            "jax.vmap(lambda w: eqx_quant.quantize(w, q))(weights) for weights of shape "
            f"(G, K, N); got {type(rhs).__name__}."
        )
    first = rhs if isinstance(rhs, ScaledTensor1x) else rhs._first
    lead = first.data.ndim - first.ndim
    if first.ndim != 2 or lead != 1 or first.data.shape[0] != groups:
        got = (first.data.shape[:lead], first.original_shape)
        raise ValueError(
            f"{fn}: rhs must stack {groups} quantized 2-D weights (one per group, a leading "
            f"dim of {groups} from jax.vmap over the experts); got leading dims {got[0]} and "
            f"per-expert shape {got[1]}."
        )
    return first


def _spec(lhs, rhs, rhs_contracting, out_dtype, scaled_impl=None):
    """The static spec of one call and the two parts it reads (every check is here)."""
    fn = "grouped_gemm"
    lp = _lhs_part(fn, lhs)
    groups = lp.group_sizes.shape[0]
    r_first = _rhs_first(fn, rhs, groups)
    if rhs_contracting not in (0, 1) or isinstance(rhs_contracting, bool):
        raise ValueError(
            f"{fn}: rhs_contracting is the dim of each expert's weight to contract: 0 for "
            f"(K, N) weights, 1 for (N, K); got {rhs_contracting!r}."
        )
    k_lhs, k_rhs = lp.original_shape[1], r_first.original_shape[rhs_contracting]
    if k_lhs != k_rhs:
        raise ValueError(
            f"{fn}: lhs has K = {k_lhs} but each expert's weight {r_first.original_shape} has "
            f"{k_rhs} along rhs_contracting={rhs_contracting}."
        )
    on_payloads = check_modes(fn, lp, r_first)
    rp = pick_part(fn, "rhs", rhs, (rhs_contracting,))
    transposed = stored_position(rp, rhs_contracting) == 1
    out = out_dtype_name(fn, lp.dq_dtype, out_dtype)
    lhs_layout = lp._layout._replace(dq_dtype="float32")
    in_bf16 = multiplies_in_bf16(lp.scaling_mode, None, rp.scaling_mode, rp.rht_sign_mask)
    spec = _Spec(lhs_layout, float32_meta(rp), in_bf16, transposed, on_payloads, out,
                 scaled_impl)
    return spec, lp, rp


def _in_kn(b, spec: _Spec):
    """The experts' weights as (G, K, N) from their stored layout (and back: it is a swap)."""
    return jnp.swapaxes(b, 1, 2) if spec.rhs_transposed else b


def _ragged(a, b, group_sizes, spec: _Spec, precision):
    """float32 ragged product of (M, K) rows with the stored weights."""
    counts = group_counts(group_sizes, a.shape[0])
    return rows_times_groups(precision)(a, _in_kn(b, spec), counts)


def _floats(lhs_arrays, rhs_arrays, spec: _Spec):
    data, scale_inv, amax, group_sizes = lhs_arrays
    a = dequantize_grouped(data, scale_inv, amax, group_sizes, spec.lhs)
    b = dequantize_stored(*rhs_arrays, spec.rhs)
    return a, b


def bf16_rows(arrays, layout: GroupedLayout):
    """A grouped block-format part's (M, K) rows as exact bfloat16 values, NVFP4's global
    scales left out (`_operands.py`)."""
    data, scale_inv, amax, group_sizes = arrays
    rows = grouped_bf16_rows(data, scale_inv, group_sizes, layout)
    if rows is not None:
        return rows
    amax = exact_value_amax(layout.scaling_mode, amax)
    return dequantize_grouped(data, scale_inv, amax, group_sizes,
                              layout._replace(dq_dtype="bfloat16"))


def _bf16_values(lhs_arrays, rhs_arrays, spec: _Spec):
    """Both operands as exact bfloat16 values, NVFP4's global scales left out."""
    rd, rs, ra = rhs_arrays
    b = dequantize_stored(rd, rs, exact_value_amax(spec.rhs.scaling_mode, ra),
                          bf16_meta(spec.rhs))
    return bf16_rows(lhs_arrays, spec.lhs), b


def _times_group_factor(y, group_sizes, per_group):
    """Each row of y times its group's factor (rows past the last group: the last one's,
    on rows that are 0)."""
    g = jnp.minimum(row_group(group_sizes, y.shape[0]), per_group.shape[0] - 1)
    return y * per_group[g][:, None]


def _group_alpha(lhs_arrays, rhs_arrays, spec: _Spec):
    """Each group's product factor (FP8 scale_inv products, NVFP4 global scales), or None."""
    lf = product_factor(spec.lhs.scaling_mode, lhs_arrays)
    rf = product_factor(spec.rhs.scaling_mode, rhs_arrays)
    return None if lf is None else lf * rf[:, 0]


def _on_kernel(lhs_arrays, rhs_arrays, spec: _Spec):
    """The forward product through the grouped GEMM op: FP8 payloads (each expert's weight
    made K-contiguous: the colwise copy is, a rowwise one is transposed here) or exact
    bfloat16 values, the group factors in its epilogue."""
    counts = group_counts(lhs_arrays[3], spec.lhs.original_shape[0])
    alpha = _group_alpha(lhs_arrays, rhs_arrays, spec)
    if spec.on_payloads:
        a, b = lhs_arrays[0], rhs_arrays[0]
        b = b if spec.rhs_transposed else jnp.swapaxes(b, 1, 2)
        return grouped_rows(a, b, counts, alpha, transposed=True, out_dtype=spec.out_dtype)
    a, b = _bf16_values(lhs_arrays, rhs_arrays, spec)
    return grouped_rows(a, b, counts, alpha, transposed=spec.rhs_transposed,
                        out_dtype=spec.out_dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _grouped_gemm_vjp(lhs_arrays, rhs_arrays, spec: _Spec):
    group_sizes = lhs_arrays[3]
    b_shape = rhs_arrays[0].shape  # (G, N, K) stored transposed, else (G, K, N)
    k, n = spec.lhs.original_shape[1], b_shape[1] if spec.rhs_transposed else b_shape[2]
    if (spec.on_payloads or spec.in_bf16) and kernel_fits((k, n), *lhs_arrays, *rhs_arrays):
        return _on_kernel(lhs_arrays, rhs_arrays, spec)
    if not (spec.on_payloads or spec.in_bf16):
        return _float_or_scaled(lhs_arrays, rhs_arrays, spec)
    if spec.on_payloads:
        y = fp8_product(functools.partial(_ragged, spec=spec, precision=None))(
            lhs_arrays[0], rhs_arrays[0], group_sizes)
    else:
        a, b = _bf16_values(lhs_arrays, rhs_arrays, spec)
        y = _ragged(a, b, group_sizes, spec, None)  # exact products, float32 sums
    lf = product_factor(spec.lhs.scaling_mode, lhs_arrays)
    rf = product_factor(spec.rhs.scaling_mode, rhs_arrays)
    if lf is not None:
        y = _times_group_factor(y, group_sizes, lf * rf[:, 0])
    return y.astype(spec.out_dtype)


def _float_or_scaled(lhs_arrays, rhs_arrays, spec: _Spec):
    """Operands whose values bfloat16 does not hold: the dequantized float32 values at
    HIGHEST precision, or the format's grouped block-scaled GEMM of the stored parts (FP8
    block scaling) where its kernel is on (or where a test forces it)."""
    group_sizes = lhs_arrays[3]

    def dequantized():
        a, b = _floats(lhs_arrays, rhs_arrays, spec)
        y = _ragged(a, b, group_sizes, spec, jax.lax.Precision.HIGHEST)
        return y.astype(spec.out_dtype)

    # The GEMM takes K-contiguous experts. Under Explicit mesh axes the two products would
    # have to agree on their typed shardings: the float product keeps them as before.
    explicit = any(explicit_sharding(x) is not None for x in (*lhs_arrays, *rhs_arrays))
    if not spec.rhs_transposed or (spec.scaled_impl is None and explicit):
        return dequantized()
    # The GEMM clamps the sizes as grouped_quantize does (docs/grouped.md, "Groups").
    y = grouped_scaled_gemm(
        spec.lhs.scaling_mode, spec.rhs.scaling_mode, lhs_arrays[0], lhs_arrays[1],
        rhs_arrays[0], rhs_arrays[1], group_sizes, out_dtype=spec.out_dtype,
        impl=spec.scaled_impl, otherwise=dequantized)
    return dequantized() if y is None else y


def _grouped_gemm_fwd(lhs_arrays, rhs_arrays, spec):
    return _grouped_gemm_vjp(lhs_arrays, rhs_arrays, spec), (lhs_arrays, rhs_arrays)


def _grouped_gemm_bwd(spec, residuals, ct):
    lhs_arrays, rhs_arrays = residuals
    group_sizes = lhs_arrays[3]
    a, b = _floats(lhs_arrays, rhs_arrays, spec)
    counts = group_counts(group_sizes, a.shape[0])
    ct = ct.astype(jnp.float32)
    highest = jax.lax.Precision.HIGHEST
    # d/da: each row's cotangent times its expert's weight transposed; d/db: per expert, its
    # rows of a transposed times their cotangents (0 for an empty group).
    ct_a = rows_times_groups(highest)(ct, jnp.swapaxes(_in_kn(b, spec), 1, 2), counts)
    ct_b = _in_kn(outer_per_group(highest)(a, ct, counts), spec)
    _, rs, ra = rhs_arrays
    ct_rhs = (ct_b, jnp.zeros_like(rs), jnp.zeros_like(ra))
    return part_cotangent(lhs_arrays, ct_a, spec.lhs), ct_rhs


_grouped_gemm_vjp.defvjp(_grouped_gemm_fwd, _grouped_gemm_bwd)


def _check_grouped_gemm(lhs, rhs, rhs_contracting, out_dtype) -> None:
    _spec(lhs, rhs, rhs_contracting, out_dtype)


@validated_by(_check_grouped_gemm)
@jaxtyped(typechecker=beartype)
def grouped_gemm(
    lhs: GroupedScaledTensor | GroupedScaledTensor1x,
    rhs: ScaledTensor | ScaledTensor1x,
    rhs_contracting: int = 0,
    *,
    out_dtype: jax.typing.DTypeLike | None = None,
) -> Shaped[Array, "M N"]:
    """The MoE expert GEMM: each token row times its group's quantized weight.

    **Arguments:**

    - `lhs`: `grouped_quantize` of the `(M, K)` token matrix (its rowwise copy is read).
    - `rhs`: G quantized weights stacked along a leading dim, e.g.
      `jax.vmap(lambda w: eqx_quant.quantize(w, q))(weights)` for weights `(G, K, N)`.
      The same family as lhs (per-tensor FP8, MXFP8 or NVFP4). For the block formats the
      copy with blocks along K is read (colwise for `(K, N)` weights), so it must be there.
    - `rhs_contracting`: the dim of each weight that is contracted with K: 0 for `(K, N)`
      weights (the forward pass), 1 for `(N, K)` (e.g. the input gradient through `(K, N)`
      weights: `dy` grouped, times each weight's rowwise copy).
    - `out_dtype`: float32, bfloat16 or float16; default lhs's original dtype.

    **Returns:** `(M, N)`; rows past the last group are 0.

    Works under `jit`, `vmap`, `grad` (straight-through) and `shard_map`.
    """
    return forced_grouped_gemm(lhs, rhs, rhs_contracting, out_dtype=out_dtype,
                               scaled_impl=None)


def forced_grouped_gemm(lhs, rhs, rhs_contracting=0, *, out_dtype=None,
                        scaled_impl: str | None):
    """`grouped_gemm` with the grouped block-scaled GEMM (FP8 block scaling) taken with the
    op's `scaled_impl` wherever the pair qualifies: `"ffi"` its kernel (CUDA), `"reference"`
    its pure-JAX reference; None (`grouped_gemm`): only where its kernel runs by default.
    For tests of the wiring before the kernel is on; other pairs are unaffected."""
    spec, lp, rp = _spec(lhs, rhs, rhs_contracting, out_dtype, scaled_impl)
    lhs_arrays = (lp.data, lp.scale_inv, lp.amax, lp.group_sizes)
    return _grouped_gemm_vjp(lhs_arrays, (rp.data, rp.scale_inv, rp.amax), spec)
