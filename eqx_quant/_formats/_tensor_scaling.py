"""Per-tensor FP8 scaling, delayed and current: one float32 scale per tensor (or group)."""

import functools
from typing import ClassVar

import jax.numpy as jnp

from .. import reference
from .._core import ScalingMode
from .._ops import (
    Fp8QuantizeParams,
    GroupedParams,
    fp8_quantize_op,
    grouped_fp8_quantize_op,
    pmax_amax,
)
from .._quantizer import CurrentScaleQuantizer
from ._base import AbstractFormat, PartArrays, Quantized, group_amax


class TensorScalingFormat(AbstractFormat):
    """FP8 E4M3/E5M2 payloads with one scale per tensor; the colwise copy is the transpose
    of the 2-D view and holds the same values as the rowwise one."""

    modes: ClassVar[tuple[ScalingMode, ...]] = (
        ScalingMode.DELAYED_TENSOR_SCALING,
        ScalingMode.CURRENT_TENSOR_SCALING,
    )
    block_size: ClassVar[int] = 0
    colwise_data_layout: ClassVar[str] = "T"
    gemm_family: ClassVar[str] = "per-tensor FP8"
    gemm_on_payloads: ClassVar[bool] = True
    values_fit_bfloat16: ClassVar[bool] = False

    def quantize(self, x, quantizer, *, flatten_axis, impl, amax_axes, key_words, with_dbias):
        del key_words
        layout = quantizer.q_layout
        observed = None
        # Current scaling runs inside the op (amax, scale and cast in the kernel's launches;
        # under sharded jit the op's partition makes the amax global first). Inside shard_map
        # with amax_axes the amax is reduced here, across the named axes, before the op.
        in_op = quantizer.needs_amax_first and not amax_axes
        if in_op:
            scale = quantizer.scale_fallback()
        else:
            if quantizer.needs_amax_first:
                observed = pmax_amax(reference.amax(x), amax_axes)
            scale = quantizer.scale_for(observed)
        params = Fp8QuantizeParams(
            q_dtype=quantizer.q_dtype,
            flatten_axis=flatten_axis,
            rowwise=layout.has_rowwise,
            colwise=layout.has_colwise,
            with_dbias=with_dbias,
            impl=impl,
            scale_from_amax=in_op,
        )
        row, col, scale_inv, kernel_amax, dbias = fp8_quantize_op.bind(x, scale, params=params)
        if observed is None:
            observed = pmax_amax(kernel_amax, amax_axes)
        part = functools.partial(PartArrays, scale_inv=scale_inv, amax=observed)
        return Quantized(
            rowwise=part(row, data_layout="N", is_colwise=False) if layout.has_rowwise else None,
            colwise=part(col, data_layout="T", is_colwise=True) if layout.has_colwise else None,
            dbias=dbias if with_dbias else None,
        )

    def grouped_quantize(self, x2d, group_sizes, quantizer, *, rows_per_unit, impl, key_words,
                         one_group_per_unit=False):
        del key_words
        current = isinstance(quantizer, CurrentScaleQuantizer)
        if current:
            amax = group_amax(x2d, group_sizes, rows_per_unit)
            scale = reference.compute_scale(amax, quantizer.q_dtype, 0.0, jnp.ones_like(amax))
        else:
            scale = quantizer.scale
        layout = quantizer.q_layout
        params = GroupedParams(
            kind="fp8", q_dtype=quantizer.q_dtype, rows_per_unit=rows_per_unit, impl=impl,
            rowwise=layout.has_rowwise, colwise=layout.has_colwise,
            one_group_per_unit=one_group_per_unit,
        )
        row, col, scale_inv, kernel_amax = grouped_fp8_quantize_op.bind(
            x2d, scale, group_sizes, params=params
        )
        amax = amax if current else kernel_amax
        return (
            PartArrays(row, scale_inv, amax, "N", False),
            PartArrays(col, scale_inv, amax, "T", True),
        )

    def dequantize(self, data, scale_inv, amax, meta):
        del amax
        s = scale_inv.reshape(scale_inv.shape[:-1] + (1,) * meta.ndim)
        return reference.cast_canonical(
            reference.multiply(data.astype(jnp.float32), s), meta.dq_dtype
        )

    def decode_rows(self, q, scale_inv, amax, group, scale_bytes):
        del amax, scale_bytes
        return reference.multiply(
            q.astype(jnp.float32), jnp.broadcast_to(scale_inv[group][:, None], q.shape)
        )

    def round_to(self, y, dq_dtype):
        return reference.cast_canonical(y, dq_dtype)

    def product_factor(self, scale_inv, amax):
        del amax
        return scale_inv
