"""eqx_quant: Equinox-native FP8 / MXFP8 / NVFP4 quantization primitives for JAX."""

from . import reference as reference
from ._enums import QuantizeLayout as QuantizeLayout, ScalingMode as ScalingMode
from ._ops._ffi import library_paths as library_paths, native_platforms as native_platforms
from ._dense import DenseQuantizers as DenseQuantizers, dense as dense
from ._gemm import gemm as gemm
from ._grouped_dense import grouped_dense as grouped_dense
from ._grouped_gemm import grouped_gemm as grouped_gemm
from ._grouped_wgrad import grouped_wgrad as grouped_wgrad
from ._grouped import (
    grouped_dbias as grouped_dbias,
    grouped_quantize as grouped_quantize,
    grouped_quantize_dbias as grouped_quantize_dbias,
)
from ._grouped_tensor import (
    GroupedScaledTensor as GroupedScaledTensor,
    GroupedScaledTensor1x as GroupedScaledTensor1x,
)
from ._quantize import quantize as quantize, quantize_dbias as quantize_dbias
from ._quantizer import (
    AbstractQuantizer as AbstractQuantizer,
    AbstractBlockQuantizer as AbstractBlockQuantizer,
    AbstractTensorScaleQuantizer as AbstractTensorScaleQuantizer,
    BlockScaleQuantizer as BlockScaleQuantizer,
    CurrentScaleQuantizer as CurrentScaleQuantizer,
    DelayedScaleQuantizer as DelayedScaleQuantizer,
    GroupedDelayedScaleQuantizer as GroupedDelayedScaleQuantizer,
    NVFP4Quantizer as NVFP4Quantizer,
)
from ._swizzle import unswizzle_scales as unswizzle_scales
from ._tensor import (
    AbstractScaledTensor as AbstractScaledTensor,
    ScaledTensor as ScaledTensor,
    ScaledTensor1x as ScaledTensor1x,
)


__version__ = "0.1.0"
