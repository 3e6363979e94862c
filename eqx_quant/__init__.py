"""eqx_quant: FP8 / MXFP8 / NVFP4 quantization for JAX, as immutable Equinox modules.

Public names only; the layers below are private subpackages (docs/design.md)."""

from . import nn as nn
from . import reference as reference
from ._core import QuantizeLayout as QuantizeLayout
from ._core import ScalingMode as ScalingMode
from ._gemm import gemm as gemm
from ._gemm import grouped_gemm as grouped_gemm
from ._gemm import grouped_wgrad as grouped_wgrad
from ._ops import library_paths as library_paths
from ._ops import native_platforms as native_platforms
from ._quantize import (
    check_finite as check_finite,
)
from ._quantize import (
    grouped_dbias as grouped_dbias,
)
from ._quantize import (
    grouped_quantize as grouped_quantize,
)
from ._quantize import (
    grouped_quantize_dbias as grouped_quantize_dbias,
)
from ._quantize import (
    quantize as quantize,
)
from ._quantize import (
    quantize_dbias as quantize_dbias,
)
from ._quantizer import (
    AbstractBlockQuantizer as AbstractBlockQuantizer,
)
from ._quantizer import (
    AbstractQuantizer as AbstractQuantizer,
)
from ._quantizer import (
    AbstractTensorScaleQuantizer as AbstractTensorScaleQuantizer,
)
from ._quantizer import (
    BlockScaleQuantizer as BlockScaleQuantizer,
)
from ._quantizer import (
    CurrentScaleQuantizer as CurrentScaleQuantizer,
)
from ._quantizer import (
    DelayedScaleQuantizer as DelayedScaleQuantizer,
)
from ._quantizer import (
    Float8BlockQuantizer as Float8BlockQuantizer,
)
from ._quantizer import (
    GroupedDelayedScaleQuantizer as GroupedDelayedScaleQuantizer,
)
from ._quantizer import (
    NVFP4Quantizer as NVFP4Quantizer,
)
from ._tensor import (
    AbstractScaledTensor as AbstractScaledTensor,
)
from ._tensor import (
    GroupedScaledTensor as GroupedScaledTensor,
)
from ._tensor import (
    GroupedScaledTensor1x as GroupedScaledTensor1x,
)
from ._tensor import (
    ScaledTensor as ScaledTensor,
)
from ._tensor import (
    ScaledTensor1x as ScaledTensor1x,
)
from ._tensor import (
    unswizzle_scales as unswizzle_scales,
)
from .nn import DenseQuantizers as DenseQuantizers
from .nn import dense as dense
from .nn import grouped_dense as grouped_dense

__version__ = "0.1.0"
