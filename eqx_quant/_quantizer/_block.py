"""The abstract block-scaled quantizer. Block quantizers (MXFP8 in `_mxfp8.py`, NVFP4 in
`_nvfp4.py`) are stateless: every scale comes from the tensor being quantized
(docs/block_formats.md)."""

from equinox import AbstractClassVar

from ._base import AbstractQuantizer


class AbstractBlockQuantizer(AbstractQuantizer):
    """A quantizer with one scale per block of elements (`block_size` of them)."""

    block_size: AbstractClassVar[int]
