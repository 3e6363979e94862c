"""Pure-JAX reference implementations: the default lowering off CPU/CUDA and the test oracle
for the kernels. Bit-exact with the kernels on every backend."""

from ._fp8 import (
    amax as amax,
    cast_fp8 as cast_fp8,
    compute_scale as compute_scale,
    dequantize_tensor as dequantize_tensor,
    fp8_quantize as fp8_quantize,
    reciprocal as reciprocal,
    transpose_2d as transpose_2d,
    untranspose_2d as untranspose_2d,
)
from ._ieee import (
    add as add,
    cast_canonical as cast_canonical,
    divide as divide,
    max_abs as max_abs,
    max_propagate_nan as max_propagate_nan,
    multiply as multiply,
    to_fp8_bytes as to_fp8_bytes,
)
from ._tree import (
    nested_tree_sum as nested_tree_sum,
    node_bounds as node_bounds,
    split_tree_sum as split_tree_sum,
    tree_sum as tree_sum,
    tree_sum_by_slices as tree_sum_by_slices,
)
