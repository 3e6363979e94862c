"""Quantized tensors (dense and grouped) as immutable Equinox modules, their dequantize with
its straight-through gradient, and GEMM-ready (swizzled) block scales."""

from ._grouped_tensor import (
    GroupedLayout as GroupedLayout,
)
from ._grouped_tensor import (
    GroupedScaledTensor as GroupedScaledTensor,
)
from ._grouped_tensor import (
    GroupedScaledTensor1x as GroupedScaledTensor1x,
)
from ._grouped_tensor import (
    dequantize_grouped as dequantize_grouped,
)
from ._grouped_tensor import (
    locate_rows as locate_rows,
)
from ._grouped_tensor import (
    rows_from_stored as rows_from_stored,
)
from ._grouped_tensor import (
    rows_view as rows_view,
)
from ._grouped_tensor import (
    stored_cotangent as stored_cotangent,
)
from ._scaled_tensor import (
    AbstractLayoutPair as AbstractLayoutPair,
)
from ._scaled_tensor import (
    AbstractScaledTensor as AbstractScaledTensor,
)
from ._scaled_tensor import (
    PartMeta as PartMeta,
)
from ._scaled_tensor import (
    ScaledTensor as ScaledTensor,
)
from ._scaled_tensor import (
    ScaledTensor1x as ScaledTensor1x,
)
from ._scaled_tensor import (
    dequantize_stored as dequantize_stored,
)
from ._swizzle import unswizzle_scales as unswizzle_scales
