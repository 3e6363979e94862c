"""`eqx_quant_grouped_mxfp8_dequantize(data, scales, group_sizes) -> out`: a grouped MXFP8
rowwise part's `(R, N)` rows as bfloat16 (each payload times its E8M0 block scale from the
group's swizzled region; rows of no group 0), the operand the grouped GEMM multiplies on
Hopper, which has no block-scaled MMA (docs/gemm.md).

Declared once, with the pure-JAX reference (`reference.grouped.grouped_mxfp8_rows_bf16`) and
a CUDA kernel (`csrc/grouped/dequantize_cuda.cu`). The kernel is compiled but not yet used
by the op (kernel_platforms is empty) until its GPU test
(`tests/cuda/test_cuda_grouped_dequantize.py`, which calls the FFI target directly) has
passed on the H200. The partition keeps every operand whole.
"""

import dataclasses

import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray
from jax.sharding import PartitionSpec

from ..reference import grouped
from ._primitive import Op, OpSpec


@dataclasses.dataclass(frozen=True)
class GroupedDequantizeParams:
    rows_per_unit: int
    impl: str

    def ffi_attrs(self) -> dict:
        return dict(rows_per_unit=np.int64(self.rows_per_unit))


def _abstract_eval(params, data, scales, group_sizes):
    del params, scales, group_sizes
    return (ShapedArray(data.shape, jnp.bfloat16),)


def _reference(params, data, scales, group_sizes):
    return (grouped.grouped_mxfp8_rows_bf16(data, scales, group_sizes,
                                            rows_per_unit=params.rows_per_unit),)


def _batch(params, args, dims):
    raise NotImplementedError(
        "eqx_quant_grouped_mxfp8_dequantize has no batching rule: the grouped GEMM calls it "
        "on one example's rows."
    )


def _sharding_rule(params, mesh, value_types, result_types):
    del params, mesh, value_types, result_types
    return "u0 u1, u2, u3 -> u4 u5"


def _partition(params, mesh, arg_infos, result_infos):
    del mesh, result_infos
    whole = tuple(PartitionSpec(*([None] * len(a.shape))) for a in arg_infos)

    def local_fn(bind_inner, *args):
        return bind_inner(*args, params=params)

    return local_fn, (PartitionSpec(None, None),), whole


def _unsharded(params, bind_inner, *args):
    return bind_inner(*args, params=params)


grouped_mxfp8_dequantize_op = Op(
    OpSpec(
        name="grouped_mxfp8_dequantize",
        abstract_eval=_abstract_eval,
        inner_abstract_eval=_abstract_eval,
        reference=_reference,
        batch=_batch,
        sharding_rule=_sharding_rule,
        partition=_partition,
        unsharded=_unsharded,
        kernel_platforms=(),
    )
)
