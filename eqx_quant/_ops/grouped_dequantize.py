"""`eqx_quant_grouped_mxfp8_dequantize(data, scales, group_sizes) -> out`: a grouped MXFP8 rowwise
part's `(R, N)` rows as bfloat16 (each payload times its E8M0 block scale from the group's
swizzled region; rows of no group 0), the operand the grouped GEMM multiplies on Hopper, which
has no block-scaled MMA (docs/gemm.md).

Declared once, with the pure-JAX reference (`reference.grouped.grouped_mxfp8_rows_bf16`), a CPU
kernel (`csrc/grouped/dequantize_cpu.cc`) and a CUDA kernel (`csrc/grouped/dequantize_cuda.cu`),
bit-equal to the reference (`tests/kernels/test_dequantize_kernels.py`,
`tests/cuda/test_cuda_grouped_dequantize.py`; its speed against XLA's version is in
docs/performance.md). The partition keeps every operand whole. Vmapped examples (each with its
own sizes and scale layout) run the reference, example by example.
"""

import dataclasses
import itertools

import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray
from jax.sharding import PartitionSpec

from ..reference import grouped
from ._primitive import Op, OpSpec, batch_first, map_examples


@dataclasses.dataclass(frozen=True)
class GroupedDequantizeParams:
    rows_per_unit: int
    impl: str
    n_batch: int = 0  # vmapped examples: the reference, one example at a time

    def ffi_attrs(self) -> dict:
        return dict(rows_per_unit=np.int64(self.rows_per_unit))


def _abstract_eval(params, data, scales, group_sizes):
    del params, scales, group_sizes
    return (ShapedArray(data.shape, jnp.bfloat16),)


def _reference_one(params, data, scales, group_sizes):
    return (grouped.grouped_mxfp8_rows_bf16(data, scales, group_sizes,
                                            rows_per_unit=params.rows_per_unit),)


def _reference(params, data, scales, group_sizes):
    args = (data, scales, group_sizes)
    if params.n_batch == 0:
        return _reference_one(params, *args)
    return map_examples(lambda *a: _reference_one(params, *a), params.n_batch, args,
                        _abstract_eval(params, *args))


def _batch(params, args, dims):
    _, moved = batch_first(args, dims)
    batched = dataclasses.replace(params, impl="reference", n_batch=params.n_batch + 1)
    return batched, moved, (0,)


def _sharding_rule(params, mesh, value_types, result_types):
    del params, mesh, result_types
    counter = itertools.count()
    return ", ".join(" ".join(f"u{next(counter)}" for _ in t.shape) for t in value_types) + (
        " -> " + " ".join(f"u{next(counter)}" for _ in value_types[0].shape))


def _partition(params, mesh, arg_infos, result_infos):
    del mesh, result_infos
    whole = tuple(PartitionSpec(*([None] * len(a.shape))) for a in arg_infos)

    def local_fn(bind_inner, *args):
        return bind_inner(*args, params=params)

    return local_fn, (whole[0],), whole


grouped_mxfp8_dequantize_op = Op(
    OpSpec(
        name="grouped_mxfp8_dequantize",
        abstract_eval=_abstract_eval,
        inner_abstract_eval=_abstract_eval,
        reference=_reference,
        batch=_batch,
        sharding_rule=_sharding_rule,
        partition=_partition,
    )
)
