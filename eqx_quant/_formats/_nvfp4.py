"""NVFP4: E2M1 payloads, one E4M3 scale per 16 elements (or 16x16 tile) and a float32
global scale per tensor (or group); optional RHT on the colwise copy and stochastic
rounding."""

import math
from typing import ClassVar

import jax
import jax.numpy as jnp

from .._core import ScalingMode
from .._ops import (
    NVFP4_DEQUANTIZE_DTYPES,
    GroupedParams,
    Nvfp4AmaxParams,
    Nvfp4DequantizeParams,
    Nvfp4QuantizeParams,
    grouped_nvfp4_quantize_op,
    nvfp4_amax_op,
    nvfp4_dequantize_op,
    nvfp4_quantize_op,
    pmax_amax,
)
from ..reference import blocks_nd, mxfp8, nvfp4
from ..reference.nvfp4 import NVFP4_BLOCK
from ._base import AbstractFormat, PartArrays, Quantized, canonical_dbias, group_amax

# A global amax whose decode scale `fl(amax / 2688)` is exactly 1: dequantizing with it
# leaves the float32 global scale out of an NVFP4 operand.
_UNIT_GLOBAL_AMAX = 6.0 * 448.0


def _group_keys(key_words, groups: int):
    """Per-group Threefry key words: `fold_in(key, g)`."""
    key = jax.random.wrap_key_data(key_words, impl="threefry2x32")
    folded = jax.vmap(lambda g: jax.random.fold_in(key, g))(jnp.arange(groups, dtype=jnp.uint32))
    return jax.random.key_data(folded)


class NVFP4Format(AbstractFormat):
    """The colwise copy is stored transposed (scales along its last axis); an E2M1 value
    times its E4M3 block scale is exact in bfloat16, the global scale is not (so GEMMs apply
    it to the product)."""

    modes: ClassVar[tuple[ScalingMode, ...]] = (
        ScalingMode.NVFP4_1D_SCALING,
        ScalingMode.NVFP4_2D_SCALING,
    )
    block_size: ClassVar[int] = nvfp4.NVFP4_BLOCK
    colwise_data_layout: ClassVar[str] = "T"
    gemm_family: ClassVar[str] = "NVFP4"
    gemm_on_payloads: ClassVar[bool] = False
    values_fit_bfloat16: ClassVar[bool] = True

    def quantize(self, x, quantizer, *, flatten_axis, impl, amax_axes, key_words, with_dbias):
        fa = flatten_axis
        layout = quantizer.q_layout
        use_rht = quantizer.use_rht and layout.has_colwise
        amax, rht_amax = nvfp4_amax_op.bind(
            x,
            params=Nvfp4AmaxParams(
                flatten_axis=fa, with_rht=use_rht, rht_sign_mask=quantizer.rht_sign_mask,
                impl=impl,
            ),
        )
        amax = pmax_amax(amax, amax_axes)
        if use_rht:
            rht_amax = pmax_amax(rht_amax, amax_axes)
        col_amax = rht_amax if use_rht else amax
        sr = quantizer.stochastic_rounding
        # Without SR the key words and index offset are not read: empty operands, which
        # (unlike zero-filled ones) cost no kernel on the GPU.
        key = key_words if sr else jnp.zeros((0,), jnp.uint32)
        params = Nvfp4QuantizeParams(
            flatten_axis=fa,
            rowwise=layout.has_rowwise,
            colwise=layout.has_colwise,
            use_2d=quantizer.use_2d,
            use_rht=use_rht,
            rht_sign_mask=quantizer.rht_sign_mask,
            stochastic_rounding=sr,
            impl=impl,
        )
        offset = jnp.zeros((x.ndim if sr else 0,), jnp.int32)
        # The op returns the final dtypes (float4_e2m1fn data, float8_e4m3fn scales).
        row, row_scale, col, col_scale = nvfp4_quantize_op.bind(
            x, amax, col_amax, key, offset, params=params
        )
        mask = quantizer.rht_sign_mask if use_rht else None
        dbias = canonical_dbias(x, fa, impl) if with_dbias else None
        return Quantized(
            rowwise=PartArrays(row, row_scale, amax, "N", False)
            if layout.has_rowwise
            else None,
            colwise=PartArrays(col, col_scale, col_amax, "T", True, mask)
            if layout.has_colwise
            else None,
            dbias=dbias,
        )

    def grouped_quantize(self, x2d, group_sizes, quantizer, *, rows_per_unit, impl, key_words,
                         one_group_per_unit=False):
        groups = group_sizes.shape[0]
        amax = group_amax(x2d, group_sizes, rows_per_unit)
        sr = quantizer.stochastic_rounding
        keys = _group_keys(key_words, groups) if sr else jnp.zeros((groups, 0), jnp.uint32)
        layout = quantizer.q_layout
        params = GroupedParams(
            kind="nvfp4", use_2d=quantizer.use_2d, stochastic_rounding=sr,
            rows_per_unit=rows_per_unit, impl=impl, rowwise=layout.has_rowwise,
            colwise=layout.has_colwise, one_group_per_unit=one_group_per_unit,
        )
        row, row_s, col, col_s = grouped_nvfp4_quantize_op.bind(
            x2d, amax, keys, group_sizes, params=params
        )
        e4m3 = lambda b: mxfp8.from_byte_view(b, dtype=jnp.float8_e4m3fn)
        return (
            PartArrays(row, e4m3(row_s), amax, "N", False),
            PartArrays(col, e4m3(col_s), amax, "T", True),
        )

    def dequantize(self, data, scale_inv, amax, meta):
        examples = amax.size
        rows = math.prod(data.shape[:-1])
        if (meta.rht_sign_mask is None and meta.dq_dtype in NVFP4_DEQUANTIZE_DTYPES
                and examples > 0 and rows % examples == 0):
            # The dequantize op (a CUDA kernel at the bandwidth floor), on the (rows, L) view.
            params = Nvfp4DequantizeParams(out_dtype=meta.dq_dtype, impl="auto")
            decode = nvfp4.global_decode_scale(amax.reshape(-1).astype(jnp.float32))
            (y,) = nvfp4_dequantize_op.bind(
                data.reshape(rows, data.shape[-1]),
                mxfp8.byte_view(scale_inv).reshape(rows, -(-data.shape[-1] // NVFP4_BLOCK)),
                decode, params=params,
            )
            return y.reshape(data.shape)
        per_example = amax.reshape(amax.shape[:-1] + (1,) * meta.ndim)  # broadcasts over blocks
        return blocks_nd.nvfp4_dequantize(
            nvfp4.e2m1_codes(data),
            mxfp8.byte_view(scale_inv),
            per_example,
            meta.dq_dtype,
            meta.rht_sign_mask,
        )

    def decode_rows(self, q, scale_inv, amax, group, scale_bytes):
        del scale_inv
        tsi = nvfp4.global_decode_scale(amax)[group]
        codes = nvfp4.e2m1_codes(q).reshape(-1, 1)
        tsi_e = jnp.broadcast_to(tsi[:, None], q.shape).reshape(-1)
        y = nvfp4.decode_blocks(codes, scale_bytes().reshape(-1), tsi_e, rht_mask=None)
        return y.reshape(q.shape)

    def round_to(self, y, dq_dtype):
        return mxfp8.round_to_dtype(y, dq_dtype)

    def gemm_amax(self, amax):
        return jnp.full_like(amax, _UNIT_GLOBAL_AMAX)

    def product_factor(self, scale_inv, amax):
        del scale_inv
        return nvfp4.global_decode_scale(amax.astype(jnp.float32))
