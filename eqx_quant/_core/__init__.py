"""The leaves of eqx_quant: enums, dtype classes, argument-check plumbing, mesh helpers.

Nothing here imports another eqx_quant subpackage."""

from ._checks import validated_by as validated_by
from ._custom_types import (
    E8M0 as E8M0,
)
from ._custom_types import (
    FP4E2M1 as FP4E2M1,
)
from ._custom_types import (
    FP8 as FP8,
)
from ._custom_types import (
    HighPrecision as HighPrecision,
)
from ._enums import QuantizeLayout as QuantizeLayout
from ._enums import ScalingMode as ScalingMode
from ._explicit import (
    explicit_sharding as explicit_sharding,
)
from ._explicit import (
    with_auto_axes as with_auto_axes,
)
from ._explicit import (
    with_auto_axes_to as with_auto_axes_to,
)
from ._manual import checked as checked
from ._manual import cotangent_for as cotangent_for
from ._manual import union_axes as union_axes
from ._manual import vary_like as vary_like
from ._manual import varying_axes as varying_axes
