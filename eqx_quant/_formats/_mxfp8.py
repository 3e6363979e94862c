"""MXFP8: FP8 payloads with one E8M0 scale per 32 elements; both copies in x's layout."""

import functools
from typing import ClassVar

import jax.numpy as jnp

from .._core import ScalingMode, with_auto_axes
from .._ops import (
    MXFP8_DEQUANTIZE_DTYPES,
    GroupedDequantizeParams,
    GroupedParams,
    Mxfp8DequantizeParams,
    Mxfp8QuantizeParams,
    blocked_view,
    grouped_mxfp8_dequantize_op,
    grouped_mxfp8_quantize_op,
    mxfp8_dequantize_op,
    mxfp8_quantize_op,
)
from ..reference import blocks_nd, mxfp8
from ._base import AbstractFormat, PartArrays, Quantized

_E8M0 = functools.partial(mxfp8.from_byte_view, dtype=jnp.float8_e8m0fnu)


class MXFP8Format(AbstractFormat):
    """Rowwise blocks run along the last axis, colwise blocks down axis `flatten_axis - 1`
    of x's layout (the colwise data is not transposed). No tensor-level scale, so (as TE)
    no amax is computed: its amax is 0."""

    modes: ClassVar[tuple[ScalingMode, ...]] = (ScalingMode.MXFP8_1D_SCALING,)
    block_size: ClassVar[int] = mxfp8.MX_BLOCK
    colwise_data_layout: ClassVar[str] = "N"
    gemm_family: ClassVar[str] = "MXFP8"
    gemm_on_payloads: ClassVar[bool] = False
    values_fit_bfloat16: ClassVar[bool] = True

    def quantize(self, x, quantizer, *, flatten_axis, impl, amax_axes, key_words, with_dbias):
        # With `with_dbias` the bias gradient comes from the same op (on the GPU the rowwise
        # blocks are written in the dbias' one read of x).
        del amax_axes, key_words
        layout = quantizer.q_layout
        params = Mxfp8QuantizeParams(
            q_dtype=quantizer.q_dtype,
            flatten_axis=flatten_axis,
            rowwise=layout.has_rowwise,
            colwise=layout.has_colwise,
            impl=impl,
            with_dbias=with_dbias,
        )
        row, row_scale, col, col_scale, dbias = mxfp8_quantize_op.bind(x, params=params)
        amax = jnp.zeros((1,), jnp.float32)
        return Quantized(
            rowwise=PartArrays(row, _E8M0(row_scale), amax, "N", False)
            if layout.has_rowwise
            else None,
            colwise=PartArrays(col, _E8M0(col_scale), amax, "N", True)
            if layout.has_colwise
            else None,
            dbias=dbias if with_dbias else None,
        )

    def grouped_quantize(self, x2d, group_sizes, quantizer, *, rows_per_unit, impl, key_words,
                         one_group_per_unit=False):
        del key_words
        layout = quantizer.q_layout
        params = GroupedParams(
            kind="mxfp8", q_dtype=quantizer.q_dtype, rows_per_unit=rows_per_unit, impl=impl,
            rowwise=layout.has_rowwise, colwise=layout.has_colwise,
            one_group_per_unit=one_group_per_unit,
        )
        row, row_s, col, col_s = grouped_mxfp8_quantize_op.bind(x2d, group_sizes, params=params)
        amax = jnp.zeros((group_sizes.shape[0],), jnp.float32)
        return (
            PartArrays(row, _E8M0(row_s), amax, "N", False),
            PartArrays(col, _E8M0(col_s), amax, "N", True),
        )

    def dequantize(self, data, scale_inv, amax, meta):
        del amax
        lead = data.ndim - meta.ndim
        # Rowwise scales run along the last axis; colwise ones along fa - 1 (both N layout).
        axis = lead + meta.flatten_axis - 1 if meta.is_colwise else data.ndim - 1
        scales = mxfp8.byte_view(scale_inv)
        if meta.dq_dtype not in MXFP8_DEQUANTIZE_DTYPES:
            return blocks_nd.mxfp8_dequantize(data, scales, axis, meta.dq_dtype)
        # The dequantize op (a CUDA kernel at the bandwidth floor), on the (A, L, B) view.
        a, length, b = blocked_view(data.shape, axis)
        params = Mxfp8DequantizeParams(out_dtype=meta.dq_dtype, impl="auto")
        (y,) = mxfp8_dequantize_op.bind(
            data.reshape(a, length, b), scales.reshape(a, -(-length // mxfp8.MX_BLOCK), b),
            params=params,
        )
        return y.reshape(data.shape)

    def grouped_bf16_rows(self, data, scale_inv, group_sizes, layout):
        """Rowwise parts: the grouped dequantize op (`_ops/grouped_dequantize.py`, a CUDA
        kernel at the bandwidth floor), bit-equal to `decode_rows` rounded to bfloat16."""
        if layout.is_colwise:
            return None
        params = GroupedDequantizeParams(rows_per_unit=layout.rows_per_unit, impl="auto")

        def rows(data, scale_inv, group_sizes):
            (y,) = grouped_mxfp8_dequantize_op.bind(
                data.reshape(layout.rows, layout.cols), mxfp8.byte_view(scale_inv),
                group_sizes, params=params,
            )
            return y.reshape(layout.original_shape)

        # Under Explicit mesh axes the op runs as under Auto axes (its partition keeps every
        # operand whole), its result typed like data.
        return with_auto_axes(rows, like=data)(data, scale_inv, group_sizes)

    def decode_rows(self, q, scale_inv, amax, group, scale_bytes):
        del scale_inv, amax, group
        name = mxfp8.dtype_name(q.dtype)
        y = mxfp8.decode_blocks(mxfp8.byte_view(q).reshape(-1, 1), scale_bytes().reshape(-1),
                                q_name=name)
        return y.reshape(q.shape)

    def round_to(self, y, dq_dtype):
        return mxfp8.round_to_dtype(y, dq_dtype)
