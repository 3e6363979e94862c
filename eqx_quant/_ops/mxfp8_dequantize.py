"""`eqx_quant_mxfp8_dequantize(data, scales) -> out`: a dense MXFP8 part's values (each
payload times its E8M0 block scale) as bfloat16 or float32 (docs/block_formats.md), the
operand a bfloat16 GEMM multiplies on Hopper, which has no block-scaled MMA.

The part is viewed as `(A, L, B)` with its blocks of 32 along L (`data`; `scales`: the E8M0
bytes, `(A, ceil(L/32), B)`): rowwise parts are `(rows, N, 1)`, colwise ones split at their
blocked axis. Declared once, with the pure-JAX reference (`reference.blocks_nd`,
`mxfp8_dequantize`), a CPU kernel (`csrc/mxfp8/dequantize_cpu.cc`) and a CUDA kernel
(`csrc/mxfp8/dequantize_cuda.cu`), bit-identical (`tests/kernels/test_dequantize_kernels.py`,
`tests/cuda/test_cuda_mxfp8_dequantize.py`).
Batching folds the examples into A; a partition keeps L whole (a block needs its scale) and
splits A and B as data is split.
"""

import dataclasses
import math

import jax.numpy as jnp
from jax.core import ShapedArray
from jax.sharding import PartitionSpec

from ..reference import blocks_nd
from . import _sharding
from ._primitive import Op, OpSpec, fold_batch_into_rows, unfold_rows

MXFP8_DEQUANTIZE_DTYPES = ("bfloat16", "float32")  # the dtypes the kernel writes


@dataclasses.dataclass(frozen=True)
class Mxfp8DequantizeParams:
    out_dtype: str
    impl: str

    def ffi_attrs(self) -> dict:
        return {}


def _abstract_eval(params, data, scales):
    del scales
    return (ShapedArray(data.shape, jnp.dtype(params.out_dtype)),)


def _reference(params, data, scales):
    return (blocks_nd.mxfp8_dequantize(data, scales, 1, params.out_dtype),)


def _sharding_rule(params, mesh, value_types, result_types):
    del params, mesh, value_types, result_types
    return "a l b, a s b -> a l b"


def _partition(params, mesh, arg_infos, result_infos):
    del result_infos
    info = arg_infos[0]
    spec = _sharding.keep_divisible(mesh, info.shape, _sharding.padded_spec(info.sharding, 3))
    a, b = spec[0], spec[2]
    if a is not None and b is not None and set(_sharding.axes_of(a)) & set(_sharding.axes_of(b)):
        b = None
    data_spec = PartitionSpec(a, None, b)

    def local_fn(bind_inner, data, scales):
        return bind_inner(data, scales, params=params)

    return local_fn, (data_spec,), (data_spec, data_spec)


mxfp8_dequantize_op = Op(
    OpSpec(
        name="mxfp8_dequantize",
        abstract_eval=_abstract_eval,
        inner_abstract_eval=_abstract_eval,
        reference=_reference,
        batch=fold_batch_into_rows,
        batch_outputs=unfold_rows,
        sharding_rule=_sharding_rule,
        partition=_partition,
    )
)


def blocked_view(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    """`(A, L, B)` of an array of `shape` blocked along `axis`."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
