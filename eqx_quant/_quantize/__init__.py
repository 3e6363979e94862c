"""The quantize front ends, dense and grouped: argument checks (`_checks.py`, shared), the
straight-through custom VJPs, and the parts built from what the format's op returns."""

from ._checks import (
    Impl as Impl,
)
from ._checks import (
    check_amax_axes as check_amax_axes,
)
from ._checks import (
    check_block_shape as check_block_shape,
)
from ._checks import (
    check_group_sizes as check_group_sizes,
)
from ._checks import (
    check_grouped as check_grouped,
)
from ._checks import (
    check_inputs as check_inputs,
)
from ._checks import (
    check_quantizer_state as check_quantizer_state,
)
from ._checks import (
    key_words_of as key_words_of,
)
from ._dense import quantize as quantize
from ._dense import quantize_dbias as quantize_dbias
from ._finite import check_finite as check_finite
from ._grouped import check_sizes_now as check_sizes_now
from ._grouped import (
    grouped_dbias as grouped_dbias,
)
from ._grouped import (
    grouped_quantize as grouped_quantize,
)
from ._grouped import (
    grouped_quantize_dbias as grouped_quantize_dbias,
)
