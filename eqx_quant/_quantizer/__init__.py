from ._base import AbstractQuantizer as AbstractQuantizer
from ._base import AbstractTensorScaleQuantizer as AbstractTensorScaleQuantizer
from ._current import CurrentScaleQuantizer as CurrentScaleQuantizer
from ._delayed import DelayedScaleQuantizer as DelayedScaleQuantizer
