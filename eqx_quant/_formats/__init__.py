"""The scaling formats: the one place that branches on the scaling mode (`_base.py` says
what a format decides). A new mode adds a format here and registers it in `_FORMATS`."""

from .._core import ScalingMode
from ._base import AbstractFormat as AbstractFormat
from ._base import GemmView as GemmView
from ._base import GroupedRows as GroupedRows
from ._base import PartArrays as PartArrays
from ._base import Quantized as Quantized
from ._fp8_block import FP8BlockFormat
from ._mxfp8 import MXFP8Format
from ._nvfp4 import NVFP4Format
from ._tensor_scaling import TensorScalingFormat

_FORMATS: dict[ScalingMode, AbstractFormat] = {
    mode: fmt
    for fmt in (TensorScalingFormat(), MXFP8Format(), NVFP4Format(), FP8BlockFormat())
    for mode in fmt.modes
}


def format_of(mode: ScalingMode) -> AbstractFormat:
    """The format that serves `mode`."""
    try:
        return _FORMATS[mode]
    except KeyError:
        raise ValueError(
            f"eqx_quant: no format serves {mode}; quantized tensors are built by "
            "eqx_quant.quantize / grouped_quantize, which set a supported scaling mode."
        ) from None


def is_block_mode(mode: ScalingMode) -> bool:
    """Whether `mode` has block scales (which a GEMM takes swizzled)."""
    return mode in _FORMATS and _FORMATS[mode].is_block
