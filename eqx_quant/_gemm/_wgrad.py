"""`grouped_wgrad`: the weight gradient of an expert GEMM, `x_g.T @ dy_g` for every group.

Both operands are grouped token matrices with the same groups: `x` `(M, K)` and `dy`
`(M, N)`; the result is `(G, K, N)`, the contraction running over each group's rows (TE's
grouped GEMM with ragged contracting dims). The block formats read each operand's colwise
copy, whose blocks run down the rows of a group; per-tensor FP8 multiplies the FP8 values
of either copy and scales group g by `scale_inv_x[g] * scale_inv_dy[g]`; MXFP8 and NVFP4 are
multiplied as exact bfloat16 values with float32 sums (NVFP4: group g times its two global
scales; `_operands.py`), FP8 block scaling, whose values bfloat16 does not hold, as
dequantized float32 values at HIGHEST precision. The gradient is straight-through, as for
`gemm`.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from beartype import beartype
from jaxtyping import Array, Shaped, jaxtyped

from .._core import checked, validated_by
from .._formats import format_of
from .._tensor import (
    GroupedLayout,
    GroupedScaledTensor,
    GroupedScaledTensor1x,
    dequantize_grouped,
    locate_rows,
    rows_view,
)
from ._grouped import bf16_rows, check_token_matrix_part, part_cotangent
from ._operands import (
    check_modes,
    fp8_product,
    multiplies_in_bf16,
    out_dtype_name,
    product_factor,
)
from ._ragged import (
    group_counts,
    grouped_outer,
    kernel_fits,
    outer_per_group,
    rows_times_groups,
)


class _Spec(NamedTuple):
    x: GroupedLayout  # float32 dequantize targets
    dy: GroupedLayout
    on_payloads: bool  # per-tensor FP8: the product of the stored payloads
    in_bf16: bool  # MXFP8, NVFP4: the product of exact bfloat16 values
    out_dtype: str
    check: bool


def _part(fn: str, name: str, operand) -> GroupedScaledTensor1x:
    if not isinstance(operand, (GroupedScaledTensor, GroupedScaledTensor1x)):
        raise TypeError(
            f"{fn}: {name} must be a GroupedScaledTensor (the result of "
            f"eqx_quant.grouped_quantize), got {type(operand).__name__}."
        )
    on_payloads = format_of(operand.scaling_mode).gemm_on_payloads
    if isinstance(operand, GroupedScaledTensor1x):
        part = operand
    elif on_payloads:
        part = operand._first  # both copies hold the same FP8 values
    else:
        part = operand.colwise
    if part is None or not (part.is_colwise or on_payloads):
        raise ValueError(
            f"{fn}: {name} is {operand.scaling_mode.name} without a colwise copy; the weight "
            "gradient contracts each group's rows, along which only the colwise blocks run. "
            "Quantize with QuantizeLayout.COLWISE or ROWWISE_COLWISE."
        )
    check_token_matrix_part(fn, name, part, "(tokens, features)")
    return part


def _spec(x, dy, out_dtype, check):
    """The static spec of one call and the two parts it reads (every check is here)."""
    fn = "grouped_wgrad"
    xp, gp = _part(fn, "x", x), _part(fn, "dy", dy)
    (m, _), (m_dy, _) = xp.original_shape, gp.original_shape
    groups, groups_dy = xp.group_sizes.shape[0], gp.group_sizes.shape[0]
    if (m, groups) != (m_dy, groups_dy):
        raise ValueError(
            f"{fn}: x and dy must have the same tokens and groups: x {xp.original_shape} in "
            f"{groups} groups, dy {gp.original_shape} in {groups_dy}."
        )
    on_payloads = check_modes(fn, xp, gp, ("x", "dy"))
    out = out_dtype_name(fn, xp.dq_dtype, out_dtype)
    f32 = dict(dq_dtype="float32")
    in_bf16 = multiplies_in_bf16(xp.scaling_mode, None, gp.scaling_mode, None)
    spec = _Spec(xp._layout._replace(**f32), gp._layout._replace(**f32), on_payloads, in_bf16,
                 out, bool(check))
    return spec, xp, gp


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _grouped_wgrad_vjp(x_arrays, dy_arrays, spec: _Spec):
    group_sizes = x_arrays[3]
    if spec.check:
        message = "grouped_wgrad: x and dy must be grouped by the same group_sizes."
        group_sizes = checked(group_sizes, jnp.any(group_sizes != dy_arrays[3]), message)
    rows = spec.x.original_shape[0]
    counts = group_counts(group_sizes, rows)
    (_, k), (_, n) = spec.x.original_shape, spec.dy.original_shape
    if not (spec.on_payloads or spec.in_bf16):
        a, c = dequantize_grouped(*x_arrays, spec.x), dequantize_grouped(*dy_arrays, spec.dy)
        out = outer_per_group(jax.lax.Precision.HIGHEST)(a, c, counts)
        return out.astype(spec.out_dtype)
    if kernel_fits((k, n), *x_arrays, *dy_arrays):
        return _on_kernel(x_arrays, dy_arrays, counts, spec)
    if spec.on_payloads:
        a = rows_view(x_arrays[0], locate_rows(group_sizes, spec.x), spec.x)
        c = rows_view(dy_arrays[0], locate_rows(group_sizes, spec.dy), spec.dy)
        out = fp8_product(outer_per_group(None))(a, c, counts)
    else:
        a, c = bf16_rows(x_arrays, spec.x), bf16_rows(dy_arrays, spec.dy)
        out = outer_per_group(None)(a, c, counts)  # exact products, float32 sums
    xf = product_factor(spec.x.scaling_mode, x_arrays)
    gf = product_factor(spec.dy.scaling_mode, dy_arrays)
    if xf is not None:
        out = out * (xf * gf)[:, None, None]
    return out.astype(spec.out_dtype)


def _on_kernel(x_arrays, dy_arrays, counts, spec: _Spec):
    """The product through the grouped GEMM op: FP8 colwise copies as stored (each group's
    transposed block is K-contiguous), other FP8 copies as exact bfloat16 rows, block formats
    as exact bfloat16 rows; the group factors in its epilogue."""
    (_, k), (_, n) = spec.x.original_shape, spec.dy.original_shape
    xf = product_factor(spec.x.scaling_mode, x_arrays)
    gf = product_factor(spec.dy.scaling_mode, dy_arrays)
    alpha = None if xf is None else xf * gf
    common = dict(k=k, n=n, out_dtype=spec.out_dtype)
    if spec.on_payloads and spec.x.data_layout == spec.dy.data_layout == "T":
        a, c = x_arrays[0].reshape(-1), dy_arrays[0].reshape(-1)
        return grouped_outer(a, c, counts, alpha, transposed=True, **common)
    if spec.on_payloads:
        group_sizes = x_arrays[3]
        a = rows_view(x_arrays[0], locate_rows(group_sizes, spec.x), spec.x)
        c = rows_view(dy_arrays[0], locate_rows(group_sizes, spec.dy), spec.dy)
        a, c = a.astype(jnp.bfloat16), c.astype(jnp.bfloat16)
    else:
        a, c = bf16_rows(x_arrays, spec.x), bf16_rows(dy_arrays, spec.dy)
    return grouped_outer(a, c, counts, alpha, transposed=False, **common)


def _grouped_wgrad_fwd(x_arrays, dy_arrays, spec):
    return _grouped_wgrad_vjp(x_arrays, dy_arrays, spec), (x_arrays, dy_arrays)


def _grouped_wgrad_bwd(spec, residuals, ct):
    x_arrays, dy_arrays = residuals
    group_sizes = x_arrays[3]
    a, c = dequantize_grouped(*x_arrays, spec.x), dequantize_grouped(*dy_arrays, spec.dy)
    counts = group_counts(group_sizes, a.shape[0])
    ct = ct.astype(jnp.float32)
    highest = rows_times_groups(jax.lax.Precision.HIGHEST)
    # out[g] = a_g.T @ c_g: row m of group g gets ct[g] @ c[m] (for a) and a[m] @ ct[g] (for c)
    ct_a = highest(c, jnp.swapaxes(ct, 1, 2), counts)
    ct_c = highest(a, ct, counts)
    return part_cotangent(x_arrays, ct_a, spec.x), part_cotangent(dy_arrays, ct_c, spec.dy)


_grouped_wgrad_vjp.defvjp(_grouped_wgrad_fwd, _grouped_wgrad_bwd)


def _check_grouped_wgrad(x, dy, out_dtype, check) -> None:
    _spec(x, dy, out_dtype, check)


@validated_by(_check_grouped_wgrad)
@jaxtyped(typechecker=beartype)
def grouped_wgrad(
    x: GroupedScaledTensor | GroupedScaledTensor1x,
    dy: GroupedScaledTensor | GroupedScaledTensor1x,
    *,
    out_dtype: jax.typing.DTypeLike | None = None,
    check: bool = True,
) -> Shaped[Array, "G K N"]:
    """The weight gradient of an expert GEMM: `x_g.T @ dy_g` for every group g.

    **Arguments:**

    - `x`: `grouped_quantize` of the `(M, K)` token matrix.
    - `dy`: `grouped_quantize` of the `(M, N)` output gradient, with the same group sizes.
      Both in one family (per-tensor FP8, MXFP8 or NVFP4); the block formats need their
      colwise copies (blocks down each group's rows).
    - `out_dtype`: float32, bfloat16 or float16; default x's original dtype.
    - `check`: raise at run time if x's and dy's group sizes differ (x's are used).

    **Returns:** `(G, K, N)`; an empty group's slice is 0.

    Works under `jit`, `vmap`, `grad` (straight-through) and `shard_map`.
    """
    spec, xp, gp = _spec(x, dy, out_dtype, check)
    sizes = (xp.group_sizes, gp.group_sizes)
    if check and not any(isinstance(s, jax.core.Tracer) for s in sizes):
        a, b = (np.asarray(s).tolist() for s in sizes)
        if a != b:  # eager: the sizes are known, so the error can show them
            raise ValueError(
                f"grouped_wgrad: x and dy must be grouped by the same group_sizes, got {a} for "
                f"x and {b} for dy. Quantize both with the same group_sizes array."
            )
    x_arrays = (xp.data, xp.scale_inv, xp.amax, xp.group_sizes)
    dy_arrays = (gp.data, gp.scale_inv, gp.amax, gp.group_sizes)
    return _grouped_wgrad_vjp(x_arrays, dy_arrays, spec)
