"""FP8 block scaling: FP8 payloads with one float32 scale per 1x128 block or 128x128 tile
(docs/block_formats.md, "FP8 block scaling")."""

import math
from typing import ClassVar

import jax
import jax.numpy as jnp

from .._core import ScalingMode
from .._ops import (
    Fp8BlockGemmParams,
    Fp8BlockQuantizeParams,
    GroupedParams,
    fp8_block_gemm_op,
    fp8_block_quantize_op,
    grouped_fp8_block_quantize_op,
)
from .._ops.grouped_fp8_block_gemm import grouped_fp8_block_gemm, kernel_runs_by_default
from ..reference import cast_canonical, fp8_block, grouped, multiply
from ._base import (
    AbstractFormat,
    GemmView,
    GroupedRows,
    PartArrays,
    Quantized,
    canonical_dbias,
)


class FP8BlockFormat(AbstractFormat):
    """The colwise copy is stored transposed, its blocks along its own rows. Without
    power-of-two scales a payload times its float32 scale has up to 28 significant bits: the
    values do not fit bfloat16. `gemm` multiplies two E4M3 operands on the block-scaled GEMM
    (`eqx_quant_fp8_block_gemm`: on CUDA CUTLASS's kernel, which applies the scales to the
    float32 partial sums of each 128-long block of the contraction), and other pairs (E5M2,
    or shapes the kernel's 16-byte TMA rows cannot hold) as dequantized float32 values. No
    tensor-level scale: its amax is 0."""

    modes: ClassVar[tuple[ScalingMode, ...]] = (
        ScalingMode.FP8_BLOCK_1D_SCALING,
        ScalingMode.FP8_BLOCK_2D_SCALING,
    )
    block_size: ClassVar[int] = fp8_block.BLOCK
    colwise_data_layout: ClassVar[str] = "T"
    gemm_family: ClassVar[str] = "FP8_BLOCK"
    gemm_on_payloads: ClassVar[bool] = False
    values_fit_bfloat16: ClassVar[bool] = False

    def quantize(self, x, quantizer, *, flatten_axis, impl, amax_axes, key_words, with_dbias):
        del amax_axes, key_words
        layout = quantizer.q_layout
        params = Fp8BlockQuantizeParams(
            q_dtype=quantizer.q_dtype,
            use_2d=quantizer.use_2d,
            power_2_scales=quantizer.power_2_scales,
            amax_epsilon=float(quantizer.amax_epsilon),
            flatten_axis=flatten_axis,
            rowwise=layout.has_rowwise,
            colwise=layout.has_colwise,
            impl=impl,
        )
        row, row_scale, col, col_scale = fp8_block_quantize_op.bind(x, params=params)
        amax = jnp.zeros((1,), jnp.float32)
        dbias = canonical_dbias(x, flatten_axis, impl) if with_dbias else None
        return Quantized(
            rowwise=PartArrays(row, row_scale, amax, "N", False) if layout.has_rowwise else None,
            colwise=PartArrays(col, col_scale, amax, "T", True) if layout.has_colwise else None,
            dbias=dbias,
        )

    def grouped_quantize(self, x2d, group_sizes, quantizer, *, rows_per_unit, impl, key_words,
                         one_group_per_unit=False):
        """The grouped op has a CPU kernel; on CUDA it composes the dense op (docs/grouped.md),
        and `impl="ffi"` raises when it is lowered there."""
        del key_words, one_group_per_unit  # the scale matrices span the whole tensor
        layout = quantizer.q_layout
        params = GroupedParams(
            kind="fp8_block", q_dtype=quantizer.q_dtype, rows_per_unit=rows_per_unit,
            impl=impl, rowwise=layout.has_rowwise, colwise=layout.has_colwise,
            use_2d=quantizer.use_2d, power_2_scales=quantizer.power_2_scales,
            amax_epsilon=float(quantizer.amax_epsilon),
        )
        row, row_s, col, col_s = grouped_fp8_block_quantize_op.bind(
            x2d, group_sizes, params=params
        )
        amax = jnp.zeros((group_sizes.shape[0],), jnp.float32)
        return (
            PartArrays(row, row_s, amax, "N", False),
            PartArrays(col, col_s, amax, "T", True),
        )

    def dequantize(self, data, scale_inv, amax, meta):
        del amax
        lead = data.ndim - meta.ndim
        stored = data.shape[lead:]
        split = meta.flatten_axis if meta.layout == "N" else meta.ndim - meta.flatten_axis
        rows, cols = math.prod(stored[:split]), math.prod(stored[split:])
        use_2d = meta.scaling_mode == ScalingMode.FP8_BLOCK_2D_SCALING
        # The examples counted explicitly: -1 is ambiguous for tensors of no elements.
        examples = math.prod(data.shape[:lead])
        flat_q = data.reshape((examples, rows, cols))
        flat_s = scale_inv.reshape((examples,) + scale_inv.shape[lead:])
        y = jax.vmap(lambda q, s: fp8_block.dequantize_2d(q, s, use_2d, meta.dq_dtype))(
            flat_q, flat_s
        )
        return y.reshape(data.shape)

    def gemm_ready_scales(self, scales2d, *, rowwise, mode):
        """cuBLASLt's layout (TE's `GEMM_READY`): 1x128 scales transposed to
        `(blocks along the contraction, rows padded to a multiple of 4)`, 128x128 scales as
        they are with their last dim padded to a multiple of 4; padding 0."""
        del rowwise
        if mode == ScalingMode.FP8_BLOCK_1D_SCALING:
            scales2d = scales2d.T
        return jnp.pad(scales2d, ((0, 0), (0, -scales2d.shape[1] % 4)))

    def from_gemm_ready_scales(self, scales, *, rowwise, mode, shape):
        del rowwise
        if mode == ScalingMode.FP8_BLOCK_1D_SCALING:
            return scales[: shape[1], : shape[0]].T
        return scales[: shape[0], : shape[1]]

    def has_scaled_gemm(self, lhs: GemmView, rhs: GemmView) -> bool:
        e4m3 = jnp.dtype(jnp.float8_e4m3fn)
        if lhs.dtype != e4m3 or rhs.dtype != e4m3 or lhs.k == 0:
            return False
        n = rhs.rows if self._lhs_is_a(lhs, rhs) else lhs.rows
        return lhs.k % 16 == 0 and n % 4 == 0

    @staticmethod
    def _lhs_is_a(lhs: GemmView, rhs: GemmView) -> bool:
        """The kernel's A has 1x128 blocks: a 128x128 lhs times a 1x128 rhs is computed as
        `(rhs @ lhs^T)^T`."""
        two_d = ScalingMode.FP8_BLOCK_2D_SCALING
        return not (lhs.mode == two_d and rhs.mode != two_d)

    def scaled_gemm(self, lhs: GemmView, rhs: GemmView, a, a_scale, b, b_scale,
                    out_dtype: str = "float32"):
        if not self._lhs_is_a(lhs, rhs):
            return self.scaled_gemm(rhs, lhs, b, b_scale, a, a_scale, out_dtype).T
        two_d = ScalingMode.FP8_BLOCK_2D_SCALING
        if lhs.mode == two_d:  # each row takes its tile's scale: 1x128 blocks, same values
            a_scale = jnp.repeat(a_scale, self.block_size, axis=0)[: lhs.rows]
        # bfloat16 straight from the kernel's epilogue where its 16-byte TMA rows allow
        # (N a multiple of 8): no float32 product and cast after it.
        out = "bfloat16" if out_dtype == "bfloat16" and rhs.rows % 8 == 0 else "float32"
        params = Fp8BlockGemmParams(b_tiles=rhs.mode == two_d, impl="auto", out_dtype=out)
        (y,) = fp8_block_gemm_op.bind(a, a_scale.T, b, b_scale.T, params=params)
        return y

    def grouped_scaled_gemm(self, lhs, rhs, a, a_scale, b, b_scale, group_sizes, *,
                            out_dtype, impl, otherwise):
        """1x128 E4M3 tokens times E4M3 experts (1x128 or 128x128) on
        `eqx_quant_grouped_fp8_block_gemm` (CUTLASS on CUDA), which takes the stored parts as
        they are: the tokens' `(M, ceil(K/128))` scales, the experts' `(G, N, ceil(K/128))`
        or `(G, ceil(N/128), ceil(K/128))`. Its kernel's 16-byte TMA rows need K a multiple of
        16 and N of 8 (bfloat16 out) or 4 (float32 out; float16 is cast from it)."""
        op_out = out_dtype if out_dtype in ("bfloat16", "float32") else "float32"
        e4m3 = jnp.dtype(jnp.float8_e4m3fn)
        fits = (
            lhs.mode == ScalingMode.FP8_BLOCK_1D_SCALING
            and lhs.dtype == rhs.dtype == e4m3
            and min(lhs.rows, lhs.k, rhs.rows, b.shape[0]) > 0
            and lhs.k % 16 == 0
            and rhs.rows % (8 if op_out == "bfloat16" else 4) == 0
        )
        if not fits:
            return None

        def product():
            y = grouped_fp8_block_gemm(a, a_scale, b, b_scale, group_sizes, out_dtype=op_out,
                                       impl="auto" if impl is None else impl)
            return y.astype(out_dtype)

        if impl is not None:
            return product()
        # Chosen when the program is lowered for a platform: the op where it runs its
        # kernel, the caller's product elsewhere. While no platform runs the kernel, the
        # op stays out of the program.
        on_kernel = {p: product for p in ("cpu", "cuda") if kernel_runs_by_default(p)}
        if not on_kernel:
            return None
        return jax.lax.platform_dependent(**on_kernel, default=otherwise)

    def decode_rows(self, q, scale_inv, amax, group, scale_bytes):
        del scale_inv, amax, group
        return multiply(q.astype(jnp.float32), scale_bytes())

    def grouped_element_scales(self, scale_inv, rows: GroupedRows, cols: int, *, colwise,
                               mode):
        """Element (r, c) of group g, local row l: 1x128 rowwise `S[r, c // 128]`, colwise
        `S[c, u_g + l // 128]`; 128x128 rowwise `S[u_g + l // 128, c // 128]`, colwise
        `S[c // 128, u_g + l // 128]` (docs/grouped.md, "FP8 block scaling")."""
        b = self.block_size
        col = jnp.arange(cols, dtype=jnp.int32)[None, :]
        row = jnp.arange(rows.local.shape[0], dtype=jnp.int32)[:, None]
        unit = (grouped.first_units(rows.counts, b)[rows.group] + rows.local // b)[:, None]
        if mode == ScalingMode.FP8_BLOCK_2D_SCALING:
            i, j = (col // b, unit) if colwise else (unit, col // b)
        else:
            i, j = (col, unit) if colwise else (row, col // b)
        flat = scale_inv.reshape(-1)
        shape = (rows.local.shape[0], cols)
        if flat.shape[0] == 0:  # no elements
            return jnp.zeros(shape, jnp.float32)
        # Rows past the last group may point past the matrix: clipped (the caller zeroes them).
        at = jnp.clip(i * scale_inv.shape[-1] + j, 0, flat.shape[0] - 1)
        return jnp.broadcast_to(flat[at], shape)

    def grouped_scale_tile(self, scale_inv, starts, counts, g, cols, *, colwise, mode):
        """1x128 rowwise: the group's rows of `S`; otherwise its columns (colwise) or rows
        (128x128 rowwise) `[u_g, u_g + ceil(rows_g / 128))`."""
        b = self.block_size
        count = int(counts[g])
        if mode == ScalingMode.FP8_BLOCK_1D_SCALING and not colwise:
            return scale_inv[int(starts[g]) : int(starts[g]) + count]
        first = int(sum(-(-int(c) // b) for c in counts[:g]))
        units = slice(first, first + -(-count // b))
        return scale_inv[:, units] if colwise else scale_inv[units]

    def round_to(self, y, dq_dtype):
        return cast_canonical(y, dq_dtype)
