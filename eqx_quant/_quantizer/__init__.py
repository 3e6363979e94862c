from ._base import AbstractQuantizer as AbstractQuantizer
from ._base import AbstractTensorScaleQuantizer as AbstractTensorScaleQuantizer
from ._current import CurrentScaleQuantizer as CurrentScaleQuantizer
from ._delayed import DelayedScaleQuantizer as DelayedScaleQuantizer
from ._block import AbstractBlockQuantizer as AbstractBlockQuantizer
from ._block import BlockScaleQuantizer as BlockScaleQuantizer
from ._block import NVFP4Quantizer as NVFP4Quantizer
from ._grouped_delayed import GroupedDelayedScaleQuantizer as GroupedDelayedScaleQuantizer
