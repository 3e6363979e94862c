"""Scaling modes and quantize layouts (hashable, used as static metadata)."""

import enum


class ScalingMode(enum.Enum):
    """How a tensor is scaled before it is cast to a low-precision format.

    - `NO_SCALING`: no quantization.
    - `DELAYED_TENSOR_SCALING`: one FP8 scale per tensor, from an amax history.
    - `CURRENT_TENSOR_SCALING`: one FP8 scale per tensor, from the tensor's own amax.
    - `MXFP8_1D_SCALING`: FP8 data, one E8M0 scale per 1x32 block.
    - `NVFP4_1D_SCALING`: E2M1 data, one E4M3 scale per 1x16 block plus an FP32 global scale.
    - `NVFP4_2D_SCALING`: as NVFP4_1D with one scale per 16x16 tile.
    - `FP8_BLOCK_1D_SCALING`: FP8 data, one float32 scale per 1x128 block (TE PyTorch's
      `Float8BlockScaling` activations and gradients; TE/common's `NVTE_BLOCK_SCALING_1D`).
    - `FP8_BLOCK_2D_SCALING`: FP8 data, one float32 scale per 128x128 tile (its weights;
      `NVTE_BLOCK_SCALING_2D`).
    """

    NO_SCALING = 0
    DELAYED_TENSOR_SCALING = 1
    MXFP8_1D_SCALING = 2
    CURRENT_TENSOR_SCALING = 3
    NVFP4_1D_SCALING = 4
    NVFP4_2D_SCALING = 5
    FP8_BLOCK_1D_SCALING = 6
    FP8_BLOCK_2D_SCALING = 7

    @property
    def is_tensor_scaling(self) -> bool:
        return self in (ScalingMode.DELAYED_TENSOR_SCALING, ScalingMode.CURRENT_TENSOR_SCALING)


class QuantizeLayout(enum.Enum):
    """Which quantized copies `quantize` produces.

    - `ROWWISE`: data in x's layout, scaled along the last axis.
    - `COLWISE`: data for the transposed use (for tensor scaling: the transpose of the
      2-D view `(prod(S[:fa]), prod(S[fa:]))`, stored with shape `S[fa:] + S[:fa]`).
    - `ROWWISE_COLWISE`: both.
    """

    ROWWISE = 0
    COLWISE = 1
    ROWWISE_COLWISE = 2

    @property
    def has_rowwise(self) -> bool:
        return self is not QuantizeLayout.COLWISE

    @property
    def has_colwise(self) -> bool:
        return self is not QuantizeLayout.ROWWISE
