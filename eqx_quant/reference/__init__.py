"""Pure-JAX reference implementations: the default lowering off CPU/CUDA and the test oracle
for the kernels. Bit-exact with the kernels on every backend.

Modules: `fp8` (per-tensor FP8), `fp8_block` (FP8 with 1x128 / 128x128 block scales), `mxfp8` and
`nvfp4` (the 2-D block arithmetic, swizzle and
byte views), `blocks_nd` (the block formats on one example of any rank), `grouped` (ragged
groups), `stochastic_rounding`, `ieee` (IEEE float32 and FP8 conversion on bit patterns) and
`tree` (the canonical pairwise tree sum)."""

from . import (
    blocks_nd as blocks_nd,
)
from . import (
    fp8 as fp8,
)
from . import (
    fp8_block as fp8_block,
)
from . import (
    grouped as grouped,
)
from . import (
    ieee as ieee,
)
from . import (
    mxfp8 as mxfp8,
)
from . import (
    nvfp4 as nvfp4,
)
from . import (
    stochastic_rounding as stochastic_rounding,
)
from . import (
    tree as tree,
)
from .fp8 import (
    amax as amax,
)
from .fp8 import (
    cast_fp8 as cast_fp8,
)
from .fp8 import (
    compute_scale as compute_scale,
)
from .fp8 import (
    dequantize_tensor as dequantize_tensor,
)
from .fp8 import (
    fp8_quantize as fp8_quantize,
)
from .fp8 import (
    reciprocal as reciprocal,
)
from .fp8 import (
    transpose_2d as transpose_2d,
)
from .fp8 import (
    untranspose_2d as untranspose_2d,
)
from .ieee import (
    add as add,
)
from .ieee import (
    cast_canonical as cast_canonical,
)
from .ieee import (
    divide as divide,
)
from .ieee import (
    max_abs as max_abs,
)
from .ieee import (
    max_propagate_nan as max_propagate_nan,
)
from .ieee import (
    multiply as multiply,
)
from .ieee import (
    to_fp8_bytes as to_fp8_bytes,
)
from .tree import (
    nested_tree_sum as nested_tree_sum,
)
from .tree import (
    node_bounds as node_bounds,
)
from .tree import (
    split_tree_sum as split_tree_sum,
)
from .tree import (
    tree_sum as tree_sum,
)
from .tree import (
    tree_sum_by_slices as tree_sum_by_slices,
)
