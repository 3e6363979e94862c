"""The block-format halves of `quantize`: MXFP8 and NVFP4 ops -> `ScaledTensor`."""

import functools

import jax.numpy as jnp
from jax import Array

from ._ops._sharding import pmax_amax
from ._ops.fp8_quantize import dbias_only_params, fp8_quantize_op
from ._ops.mxfp8_quantize import Mxfp8QuantizeParams, mxfp8_quantize_op
from ._ops.nvfp4_quantize import (
    Nvfp4AmaxParams,
    Nvfp4QuantizeParams,
    nvfp4_amax_op,
    nvfp4_quantize_op,
)
from ._tensor import ScaledTensor, ScaledTensor1x
from .reference import _mx


def _parts(x, quantizer, fa: int):
    return functools.partial(
        ScaledTensor1x,
        scaling_mode=quantizer.scaling_mode,
        flatten_axis=fa,
        ndim=x.ndim,
        dq_dtype=x.dtype.name,
    )


def mxfp8(x, quantizer, fa: int, impl: str, with_dbias: bool) -> tuple[ScaledTensor, Array | None]:
    """The MXFP8 tensor, and with `with_dbias` the bias gradient from the same op (on the GPU
    the rowwise blocks are written in the dbias' one read of x)."""
    layout = quantizer.q_layout
    params = Mxfp8QuantizeParams(
        q_dtype=quantizer.q_dtype,
        flatten_axis=fa,
        rowwise=layout.has_rowwise,
        colwise=layout.has_colwise,
        impl=impl,
        with_dbias=with_dbias,
    )
    row, row_scale, col, col_scale, dbias = mxfp8_quantize_op.bind(x, params=params)
    part = _parts(x, quantizer, fa)
    # MXFP8 has no tensor-level scale, so (like TE) no amax is computed.
    amax = jnp.zeros((1,), jnp.float32)
    e8m0 = functools.partial(_mx.from_byte_view, dtype=jnp.float8_e8m0fnu)
    tensor = ScaledTensor(
        rowwise=part(data=row, scale_inv=e8m0(row_scale), amax=amax, data_layout="N")
        if layout.has_rowwise
        else None,
        colwise=part(
            data=col, scale_inv=e8m0(col_scale), amax=amax, data_layout="N", is_colwise=True
        )
        if layout.has_colwise
        else None,
    )
    return tensor, (dbias if with_dbias else None)


def nvfp4(x, quantizer, fa: int, impl: str, amax_axes, key_words) -> ScaledTensor:
    layout = quantizer.q_layout
    use_rht = quantizer.use_rht and layout.has_colwise
    amax, rht_amax = nvfp4_amax_op.bind(
        x,
        params=Nvfp4AmaxParams(
            flatten_axis=fa, with_rht=use_rht, rht_sign_mask=quantizer.rht_sign_mask, impl=impl
        ),
    )
    amax = pmax_amax(amax, amax_axes)
    if use_rht:
        rht_amax = pmax_amax(rht_amax, amax_axes)
    col_amax = rht_amax if use_rht else amax
    sr = quantizer.stochastic_rounding
    # Without SR the key words and index offset are not read: empty operands, which (unlike
    # zero-filled ones) cost no kernel on the GPU.
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
    row, row_scale, col, col_scale = nvfp4_quantize_op.bind(
        x, amax, col_amax, key, offset, params=params
    )
    # The op returns the final dtypes (float4_e2m1fn data, float8_e4m3fn scales).
    part = _parts(x, quantizer, fa)
    return ScaledTensor(
        rowwise=part(data=row, scale_inv=row_scale, amax=amax, data_layout="N")
        if layout.has_rowwise
        else None,
        colwise=part(
            data=col,
            scale_inv=col_scale,
            amax=col_amax,
            data_layout="T",
            is_colwise=True,
            rht_sign_mask=quantizer.rht_sign_mask if use_rht else None,
        )
        if layout.has_colwise
        else None,
    )


def dbias(dx, fa: int, impl: str):
    """The bias gradient of NVFP4's `quantize_dbias`: the FP8 op with no FP8 output, its
    canonical tree sum only (one more read of `dx`; MXFP8 takes it from its own op)."""
    one = jnp.ones((1,), jnp.float32)
    *_, db = fp8_quantize_op.bind(dx, one, params=dbias_only_params(0, fa, impl))
    return db
