"""More than 2^31 elements on the GPU: a 65536 x 40960 bf16 tensor (5 GiB, 2.7e9 elements),
so every element offset past row 52429 needs more than 31 bits, and grouped offsets past
2^31 (the checks: tests/support/large.py)."""

import pytest

from tests.support import large
from tests.support.cuda import CUDA, requires_cuda

pytestmark = [requires_cuda("mxfp8_quantize"), pytest.mark.skipif(
    CUDA is not None and CUDA.memory_stats() is not None
    and CUDA.memory_stats().get("bytes_limit", 0) < 40 * 2**30,
    reason="needs a CUDA device with 40 GiB")]

CASE = large.LargeCase(
    rows=65536, cols=40960,
    sample=(0, 1, 31, 32768, 52429, 60001, 65535),  # 52429 * 40960 > 2^31
    block_starts=(0, 52416, 65536 - 32),
    group_sizes=(20000, 0, 32429, 13107),  # group 3 starts past 2^31
)


@pytest.fixture(scope="module")
def x():
    big = large.big_input(CASE, CUDA, random=True)
    yield big
    big.delete()


def test_delayed_and_current_fp8(x):
    large.check_delayed_and_current_fp8(x, CASE)


def test_mxfp8_rowwise_and_colwise(x):
    large.check_mxfp8_rowwise_and_colwise(x, CASE)


def test_nvfp4_rowwise(x):
    large.check_nvfp4_rowwise(x, CASE)


def test_grouped_mxfp8_offsets_past_2_31(x):
    large.check_grouped_mxfp8_offsets_past_2_31(x, CASE)
