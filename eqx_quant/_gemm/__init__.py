"""The GEMMs on quantized operands: `gemm` (dense), `grouped_gemm` (the MoE expert GEMM),
`grouped_wgrad` (its weight gradient), the operand choice they share, and the ragged
products that fold a vmapped batch into one problem."""

from ._dense import gemm as gemm
from ._grouped import grouped_gemm as grouped_gemm
from ._operands import check_modes as check_modes
from ._ragged import grouped_outer as grouped_outer
from ._ragged import grouped_rows as grouped_rows
from ._ragged import row_group as row_group
from ._wgrad import grouped_wgrad as grouped_wgrad
