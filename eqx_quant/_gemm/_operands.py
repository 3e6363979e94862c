"""Operand choice for every GEMM: which stored copy a contraction reads, the static
metadata a GEMM dequantizes with, the family and output-dtype checks, and the FP8 product.

What differs between scaling modes (the GEMM family, whether the payloads are multiplied,
the factor of the product) comes from the operand's format (`_formats`).

Block formats are multiplied as their exact values. Hopper has no block-scaled MMA, so
`gemm`, `grouped_gemm` and `grouped_wgrad` multiply MXFP8 and NVFP4 operands as dequantized
values. Those values fit bfloat16 exactly:

- MXFP8: an E4M3 (4 significant bits) or E5M2 (3) payload times a power of two (E8M0);
- NVFP4: an E2M1 payload (2 significant bits) times its E4M3 block scale (4): at most 5
  significant bits, from 2^-10 to 2688. The FP32 global scale (`amax / 2688`) has 24, so it
  is left out of the operand and applied to the product instead.

bfloat16 has 8 significant bits and float32's exponent range, so every value from 2^-126 up
is exact. (Smaller ones, which only MXFP8 blocks with an E8M0 scale below 2^-117 hold, are
subnormal in float32 too: XLA's CPU dot flushes them to zero, as it did their float32 copies,
and bfloat16 keeps them to a grid of 2^-133.) The products of two bfloat16 values are exact
in float32, so a bfloat16 GEMM with float32 accumulation (the tensor cores' bf16 MMA)
computes what a block-scaled GEMM computes, up to the order of the float32 sums, at bfloat16
speed rather than float32's.

The random Hadamard transform cancels in a product when both operands carry it along the
contracted dim with one sign mask (`(H D a) . (H D b) = a . b`: H D is orthogonal), so such
pairs are multiplied without undoing it, as TE's GEMM does. An operand whose RHT does not
cancel (only one side has it, or the masks differ) is undone in float32, which bfloat16
cannot hold: such pairs are multiplied in float32 at HIGHEST precision (on an H200, 0.06x a
bf16 GEMM against ~0.9x for the bfloat16 path; docs/performance.md).
"""

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from .._formats import GemmView, format_of
from .._tensor import PartMeta, ScaledTensor1x

OUT_DTYPES = ("float32", "bfloat16", "float16")


def multiplies_in_bf16(lhs_mode, lhs_rht, rhs_mode, rhs_rht) -> bool:
    """Whether a pair of parts is multiplied as exact bfloat16 values (module doc): block
    formats with no RHT, or the same RHT on both (it cancels)."""
    formats = (format_of(lhs_mode), format_of(rhs_mode))
    if any(f.gemm_on_payloads or not f.values_fit_bfloat16 for f in formats):
        return False
    return lhs_rht == rhs_rht


def scaled_gemm_views(lhs: ScaledTensor1x, lhs_dims, rhs: ScaledTensor1x, rhs_dims):
    """The pair's 2-D views where their format multiplies it on a block-scaled GEMM (FP8
    block scaling), else None. Block formats contract trailing stored dims (`pick_part`)."""
    views = (_gemm_view(lhs, lhs_dims), _gemm_view(rhs, rhs_dims))
    if None in views or not format_of(lhs.scaling_mode).has_scaled_gemm(*views):
        return None
    return views


def _gemm_view(part: ScaledTensor1x, dims: tuple[int, ...]) -> GemmView | None:
    stored = sorted(stored_position(part, d) for d in dims)
    free = part.ndim - len(dims)
    if stored != list(range(free, part.ndim)):
        return None
    shape = part.data.shape
    return GemmView(math.prod(shape[:free]), math.prod(shape[free:]),
                    jnp.dtype(part.data.dtype), part.scaling_mode)


def scaled_gemm(views, a, a_scale, b, b_scale, out_dtype: str = "float32"):
    """`(M, N)` block-scaled product of two 2-D views (`scaled_gemm_views`): float32 sums,
    in `out_dtype` where the GEMM writes it, else float32."""
    lhs, rhs = views
    return format_of(lhs.mode).scaled_gemm(lhs, rhs, a, a_scale, b, b_scale, out_dtype)


def grouped_scaled_gemm(lhs_mode, rhs_mode, a, a_scale, b, b_scale, group_sizes, *,
                        out_dtype: str, impl: str | None, otherwise):
    """The expert GEMM's product of token rows `a (M, K)` and experts `b (G, N, K)` (the
    stored payloads and scales) on their format's grouped block-scaled GEMM, or None where
    it has none for the pair (`AbstractFormat.grouped_scaled_gemm`)."""
    lhs = GemmView(a.shape[0], a.shape[1], jnp.dtype(a.dtype), lhs_mode)
    rhs = GemmView(b.shape[1], b.shape[2], jnp.dtype(b.dtype), rhs_mode)
    return format_of(lhs_mode).grouped_scaled_gemm(
        lhs, rhs, a, a_scale, b, b_scale, group_sizes, out_dtype=out_dtype, impl=impl,
        otherwise=otherwise)


def grouped_bf16_rows(data, scale_inv, group_sizes, layout):
    """A grouped part's rows as exact bfloat16 values in the format's own op, or None."""
    return format_of(layout.scaling_mode).grouped_bf16_rows(data, scale_inv, group_sizes,
                                                             layout)


def product_factor(mode, arrays):
    """The factor that scales a product of payloads or exact values, per tensor (or group),
    from an operand's (data, scale_inv, amax, ...) arrays; None where there is none."""
    return format_of(mode).product_factor(arrays[1], arrays[2])


def exact_value_amax(mode, amax):
    """The amax to dequantize an operand's exact (bfloat16) values with."""
    return format_of(mode).gemm_amax(amax)


def normalize_dims(fn: str, side: str, dims, ndim: int) -> tuple[int, ...]:
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


def pick_part(fn: str, side: str, operand, dims: tuple[int, ...]) -> ScaledTensor1x:
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
    if format_of(first.scaling_mode).gemm_on_payloads:
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


def stored_position(part: ScaledTensor1x, d: int) -> int:
    if part.data_layout == "N":
        return d
    fa = part.flatten_axis
    return d - fa if d >= fa else part.ndim - fa + d


def float32_meta(part: ScaledTensor1x) -> PartMeta:
    """The part's dequantize metadata, with float32 (exact, unrounded) as the target."""
    return PartMeta(
        part.scaling_mode,
        "float32",
        part.data_layout,
        part.flatten_axis,
        part.ndim,
        part.rht_sign_mask,
        part.is_colwise,
    )


def bf16_meta(meta: PartMeta) -> PartMeta:
    """Dequantize metadata for a bfloat16 GEMM (`_exact_values.py`): bfloat16 target, and the
    RHT left in (the pair's RHT cancels in the product)."""
    return meta._replace(dq_dtype="bfloat16", rht_sign_mask=None)


def check_modes(fn: str, lhs, rhs, names: tuple[str, str] = ("lhs", "rhs")) -> bool:
    a, b = lhs.scaling_mode, rhs.scaling_mode
    if format_of(a).gemm_family != format_of(b).gemm_family:
        raise ValueError(
            f"{fn}: {names[0]} is {a.name} and {names[1]} is {b.name}; a GEMM takes two "
            "per-tensor FP8 operands (delayed or current), two MXFP8 operands, two NVFP4 "
            "operands (1D or 2D), or two FP8 block-scaled operands (1x128 or 128x128). "
            "Quantize both operands in one family."
        )
    return format_of(a).gemm_on_payloads


def out_dtype_name(fn: str, lhs_dtype: str, out_dtype) -> str:
    name = lhs_dtype if out_dtype is None else jnp.dtype(out_dtype).name
    if name not in OUT_DTYPES:
        raise ValueError(
            f"{fn}: out_dtype must be one of {OUT_DTYPES} (None: lhs's original dtype), got "
            f"{name}."
        )
    return name


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


