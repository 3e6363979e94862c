"""What a scaling format is: everything that differs between scaling modes, in one contract.

Each final format (`_tensor_scaling.py`, `_mxfp8.py`, `_nvfp4.py`, `_fp8_block.py`) says,
for its modes: which op quantizes (dense and grouped) and how the op's outputs become parts,
how a part is dequantized, what a GEMM multiplies (the payloads, the exact values, or a
block-scaled product, dense or grouped) and what factor scales the product, and how its
scales are laid out (block size, colwise orientation).
Nothing outside `_formats/` branches on the scaling mode.
"""

import abc
import functools
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax.numpy as jnp
from jax.sharding import PartitionSpec
from jaxtyping import Array

from .._core import ScalingMode, with_auto_axes
from .._ops import dbias_only_params, fp8_quantize_op
from ..reference import grouped, mxfp8


class PartArrays(NamedTuple):
    """One quantized copy as an op returns it; the front ends add the static metadata
    (scaling mode, shapes, dtype) and build a `ScaledTensor1x` / `GroupedScaledTensor1x`."""

    data: Array
    scale_inv: Array
    amax: Array
    data_layout: str  # "N": x's layout; "T": the transpose of the 2-D view
    is_colwise: bool
    rht_sign_mask: int | None = None


class Quantized(NamedTuple):
    """A dense quantize: the requested copies (None where not asked for) and the dbias."""

    rowwise: PartArrays | None
    colwise: PartArrays | None
    dbias: Array | None


class GemmView(NamedTuple):
    """A GEMM operand's 2-D view, as the format decides on a block-scaled GEMM: rows x the
    contraction (trailing), its payload dtype and scaling mode."""

    rows: int
    k: int
    dtype: jnp.dtype
    mode: ScalingMode


class GroupedRows(NamedTuple):
    """Where every row of a grouped part's (R, N) view lies: its group (clamped to G - 1 for
    rows past the last group) and its index inside the group, with the groups' bounds."""

    starts: Array
    counts: Array
    group: Array
    local: Array


class AbstractFormat(eqx.Module):
    """One scaling format (one or more `ScalingMode`s that share their arithmetic)."""

    # The modes this format serves.
    modes: eqx.AbstractClassVar[tuple[ScalingMode, ...]]
    # Elements per scale along the blocked axis; 0 for one scale per tensor (or group).
    block_size: eqx.AbstractClassVar[int]
    # The colwise copy's data layout: "T" (stored transposed) or "N" (x's layout, blocks
    # down axis flatten_axis - 1, so its scale matrix is the transpose of a rowwise one).
    colwise_data_layout: eqx.AbstractClassVar[str]
    # What a GEMM pairs: two operands of one family (NVFP4 1D and 2D are one family).
    gemm_family: eqx.AbstractClassVar[str]
    # Whether a GEMM multiplies the stored payloads (then both copies hold the same values
    # and any dims may be contracted), rather than the dequantized block values.
    gemm_on_payloads: eqx.AbstractClassVar[bool]
    # Whether every dequantized value is exact in bfloat16, so that a GEMM of exact values
    # runs as a bfloat16 GEMM with float32 accumulation (else in float32).
    values_fit_bfloat16: eqx.AbstractClassVar[bool]

    @property
    def is_block(self) -> bool:
        return self.block_size > 0

    @abc.abstractmethod
    def quantize(
        self, x, quantizer, *, flatten_axis: int, impl: str, amax_axes: tuple[str, ...],
        key_words, with_dbias: bool,
    ) -> Quantized:
        """Quantize one tensor (leading vmapped dims are the op's business)."""

    @abc.abstractmethod
    def grouped_quantize(
        self, x2d, group_sizes, quantizer, *, rows_per_unit: int, impl: str, key_words,
        one_group_per_unit: bool = False,
    ) -> tuple[PartArrays, PartArrays]:
        """Quantize the (R, N) rows of a grouped tensor: the rowwise and the colwise part
        (only those the quantizer's layout asks for are read by the caller).
        `one_group_per_unit`: group g is unit g (`group_sizes=None`, a weight-like
        `[G, K, N]`), which lets a partition split the groups over devices."""

    @abc.abstractmethod
    def dequantize(self, data, scale_inv, amax, meta) -> Array:
        """A dense part's values in its stored layout (leading vmapped dims allowed), in
        `meta.dq_dtype`."""

    @abc.abstractmethod
    def decode_rows(self, q, scale_inv, amax, group, scale_bytes: Callable[[], Array]) -> Array:
        """A grouped part's float32 values on its (R, N) row view `q`: `group` is the group
        of every row, `scale_bytes()` every element's block scale from
        `grouped_element_scales` (block formats)."""

    def grouped_element_scales(self, scale_inv, rows: GroupedRows, cols: int, *,
                               colwise: bool, mode: ScalingMode) -> Array:
        """Every element's block scale of a grouped block-format part, on its (R, N) row view,
        as `decode_rows` takes it. Here: the byte from the per-group swizzled regions (MXFP8,
        NVFP4; docs/grouped.md, "Block scales")."""
        del mode
        block = self.block_size
        regions = grouped.scale_regions(rows.counts, cols, block, colwise)
        c = jnp.arange(cols, dtype=jnp.int32)[None, :]
        local = rows.local[:, None]
        shape = (rows.local.shape[0], cols)
        if colwise:  # T_g[c, local // B]
            i, j = jnp.broadcast_to(c, shape), local // block
        else:  # T_g[local, c // B]
            i, j = jnp.broadcast_to(local, shape), c // block
        g = rows.group
        q = regions.padded_cols[g][:, None]
        at = regions.offsets[g][:, None] + mxfp8.swizzle_offset(i, j, q)
        u = mxfp8.byte_view(scale_inv)
        return u[jnp.clip(at, 0, max(u.shape[0] - 1, 0))]

    def grouped_scale_tile(self, scale_inv, starts, counts, g: int, cols: int, *,
                           colwise: bool, mode: ScalingMode) -> Array:
        """Group `g`'s block scales as the dense part of its rows holds them (`starts`,
        `counts`: concrete group bounds). Here: its swizzled region, unswizzled (MXFP8,
        NVFP4)."""
        del starts, mode
        regions = grouped.scale_regions(jnp.asarray(counts), cols, self.block_size, colwise)
        begin = int(regions.offsets[g])
        rp, cp = int(regions.padded_rows[g]), int(regions.padded_cols[g])
        region = scale_inv[begin : begin + rp * cp].reshape(rp, cp)
        shape = (int(regions.tile_rows[g]), int(regions.tile_cols[g]))
        tile = mxfp8.unswizzle_scales(region, rowwise=True, shape=shape)
        # A colwise part kept in x's layout has its scales down the rows.
        return tile.T if colwise and self.colwise_data_layout == "N" else tile

    @abc.abstractmethod
    def round_to(self, y, dq_dtype: str) -> Array:
        """float32 values rounded once to `dq_dtype`, as this format's dequantize rounds."""

    def gemm_ready_scales(self, scales2d, *, rowwise: bool, mode: ScalingMode) -> Array:
        """A part's 2-D block-scale matrix as a block-scaled GEMM takes it: padded to (128, 4)
        tiles and swizzled into cuBLAS's tile order (MXFP8, NVFP4; `rowwise`: tiled as a
        rowwise matrix)."""
        del mode
        return mxfp8.swizzle_scales(scales2d, rowwise=rowwise)

    def from_gemm_ready_scales(
        self, scales, *, rowwise: bool, mode: ScalingMode, shape: tuple[int, int]
    ) -> Array:
        """Inverse of `gemm_ready_scales`: the `shape` matrix back."""
        del mode
        return mxfp8.unswizzle_scales(scales, rowwise=rowwise, shape=shape)

    def gemm_amax(self, amax) -> Array:
        """The amax to dequantize a GEMM operand's exact (bfloat16) values with: a global
        scale, where the format has one, is left out and applied to the product."""
        return amax

    def product_factor(self, scale_inv, amax) -> Array | None:
        """What scales a product of payloads or exact values, per tensor (or group); None
        where the operand values are already complete."""
        return None

    def grouped_bf16_rows(self, data, scale_inv, group_sizes, layout) -> Array | None:
        """A grouped part's rows as exact bfloat16 values (the grouped GEMM's operand) in one
        op of the format's own, or None: then `decode_rows` decodes them in XLA."""
        del data, scale_inv, group_sizes, layout
        return None

    def has_scaled_gemm(self, lhs: GemmView, rhs: GemmView) -> bool:
        """Whether `scaled_gemm` multiplies this pair (a block-scaled GEMM of the payloads,
        the scales applied to partial sums); else the GEMM multiplies dequantized values."""
        del lhs, rhs
        return False

    def scaled_gemm(self, lhs: GemmView, rhs: GemmView, a, a_scale, b, b_scale,
                    out_dtype: str = "float32") -> Array:
        """The `(M, N)` product of two parts' 2-D views (`a (M, K)`, `b (N, K)`, the
        contraction trailing, with their compact scales), where `has_scaled_gemm`: float32
        sums, in `out_dtype` where the GEMM can write it (else float32)."""
        raise NotImplementedError(f"{type(self).__name__} has no block-scaled GEMM")

    def grouped_scaled_gemm(self, lhs: GemmView, rhs: GemmView, a, a_scale, b, b_scale,
                            group_sizes, *, out_dtype: str, impl: str | None,
                            otherwise: Callable[[], Array]) -> Array | None:
        """The expert GEMM's `(M, N)` product in `out_dtype` on a grouped block-scaled GEMM,
        or None where the format has none for this pair (the caller then multiplies the
        dequantized values). `a (M, K)`: a grouped part's rowwise payloads, its groups
        `group_sizes`; `b (G, N, K)`: the experts' payloads, the contraction trailing; the
        scales as the parts store them; `lhs`, `rhs`: the 2-D views of `a` and of one expert.

        `impl=None`: the GEMM only where it runs its compiled kernel by default; elsewhere
        the product is `otherwise()` (the dequantized one, in `out_dtype`), chosen when the
        program is lowered for a platform. `"ffi"` / `"reference"` force the GEMM's kernel
        or its pure-JAX reference on every platform (tests)."""
        del lhs, rhs, a, a_scale, b, b_scale, group_sizes, out_dtype, impl, otherwise
        return None


def group_amax(x2d, group_sizes, rows_per_unit: int):
    """Per-group amax (replicated); under Explicit mesh axes computed as under Auto axes."""
    fn = functools.partial(grouped.group_amax, rows_per_unit=rows_per_unit)
    return with_auto_axes(fn, like=x2d, out_spec=PartitionSpec())(x2d, group_sizes)


def canonical_dbias(x, flatten_axis: int, impl: str):
    """The bias gradient of x from the FP8 op's dbias-only form (no FP8 output): its
    canonical tree sum, in x's dtype, for formats whose own op computes none (one more read
    of x)."""
    one = jnp.ones((1,), jnp.float32)
    *_, dbias = fp8_quantize_op.bind(x, one, params=dbias_only_params(0, flatten_axis, impl))
    return dbias
