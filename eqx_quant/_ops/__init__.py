"""The quantize ops: one primitive declaration per op (`_primitive.py`), lowered to the CPU
and CUDA kernels of the FFI library (`_ffi.py`) or to the pure-JAX reference."""

from ._ffi import (
    library_paths as library_paths,
)
from ._ffi import (
    native_ops as native_ops,
)
from ._ffi import (
    native_platforms as native_platforms,
)
from ._sharding import pmax_amax as pmax_amax
from .fp8_block_gemm import (
    Fp8BlockGemmParams as Fp8BlockGemmParams,
)
from .fp8_block_gemm import (
    fp8_block_gemm_op as fp8_block_gemm_op,
)
from .fp8_block_quantize import (
    Fp8BlockQuantizeParams as Fp8BlockQuantizeParams,
)
from .fp8_block_quantize import (
    fp8_block_quantize_op as fp8_block_quantize_op,
)
from .fp8_quantize import (
    Fp8QuantizeParams as Fp8QuantizeParams,
)
from .fp8_quantize import (
    dbias_only_params as dbias_only_params,
)
from .fp8_quantize import (
    fp8_quantize_op as fp8_quantize_op,
)
from .group_sizes_check import (
    GroupSizesCheckParams as GroupSizesCheckParams,
)
from .group_sizes_check import (
    group_sizes_check_op as group_sizes_check_op,
)
from .grouped_dequantize import (
    GroupedDequantizeParams as GroupedDequantizeParams,
)
from .grouped_dequantize import (
    grouped_mxfp8_dequantize_op as grouped_mxfp8_dequantize_op,
)
from .grouped_fp8_block_gemm import (
    GroupedFp8BlockGemmParams as GroupedFp8BlockGemmParams,
)
from .grouped_fp8_block_gemm import (
    grouped_fp8_block_gemm_op as grouped_fp8_block_gemm_op,
)
from .grouped_gemm import (
    GroupedGemmParams as GroupedGemmParams,
)
from .grouped_gemm import (
    grouped_gemm_op as grouped_gemm_op,
)
from .grouped_quantize import (
    GroupedParams as GroupedParams,
)
from .grouped_quantize import (
    grouped_dbias_op as grouped_dbias_op,
)
from .grouped_quantize import (
    grouped_fp8_block_quantize_op as grouped_fp8_block_quantize_op,
)
from .grouped_quantize import (
    grouped_fp8_quantize_op as grouped_fp8_quantize_op,
)
from .grouped_quantize import (
    grouped_mxfp8_quantize_op as grouped_mxfp8_quantize_op,
)
from .grouped_quantize import (
    grouped_nvfp4_quantize_op as grouped_nvfp4_quantize_op,
)
from .mxfp8_dequantize import (
    MXFP8_DEQUANTIZE_DTYPES as MXFP8_DEQUANTIZE_DTYPES,
)
from .mxfp8_dequantize import (
    Mxfp8DequantizeParams as Mxfp8DequantizeParams,
)
from .mxfp8_dequantize import (
    blocked_view as blocked_view,
)
from .mxfp8_dequantize import (
    mxfp8_dequantize_op as mxfp8_dequantize_op,
)
from .mxfp8_quantize import (
    Mxfp8QuantizeParams as Mxfp8QuantizeParams,
)
from .mxfp8_quantize import (
    mxfp8_quantize_op as mxfp8_quantize_op,
)
from .nvfp4_dequantize import (
    NVFP4_DEQUANTIZE_DTYPES as NVFP4_DEQUANTIZE_DTYPES,
)
from .nvfp4_dequantize import (
    Nvfp4DequantizeParams as Nvfp4DequantizeParams,
)
from .nvfp4_dequantize import (
    nvfp4_dequantize_op as nvfp4_dequantize_op,
)
from .nvfp4_quantize import (
    Nvfp4AmaxParams as Nvfp4AmaxParams,
)
from .nvfp4_quantize import (
    Nvfp4QuantizeParams as Nvfp4QuantizeParams,
)
from .nvfp4_quantize import (
    nvfp4_amax_op as nvfp4_amax_op,
)
from .nvfp4_quantize import (
    nvfp4_quantize_op as nvfp4_quantize_op,
)
