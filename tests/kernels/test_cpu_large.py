"""More than 2^31 elements through the CPU kernels: a 32768 x 65600 bf16 tensor (4 GiB,
2.1e9 elements; the first element of row 32737 is past 2^31) and grouped offsets past 2^31
(the checks: tests/support/large.py). Each op holds the input and at most two 2 GiB outputs;
skipped where the machine has less memory available than that needs."""

import os

import jax
import pytest

from tests.support import large
from tests.support.kernels import has_kernels

CASE = large.LargeCase(
    rows=32768, cols=65600,
    sample=(0, 1, 16384, 32736, 32737, 32767),  # 32737 * 65600 > 2^31
    block_starts=(0, 32704, 32736),
    group_sizes=(20000, 0, 12737, 31),  # group 3 starts at row 32737
)
NEEDED_GIB = 14


def _available_gib() -> float:
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) / 2**20
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30


pytestmark = [
    pytest.mark.skipif(not has_kernels("cpu", ("mxfp8_quantize",)),
                       reason="needs eqx_quant's CPU kernels"),
    pytest.mark.skipif(jax.default_backend() != "cpu",
                       reason="the GPU's own test is tests/cuda/test_cuda_large.py"),
    pytest.mark.long,
]


@pytest.fixture(scope="module")
def x():
    if _available_gib() < NEEDED_GIB:
        pytest.skip(f"needs {NEEDED_GIB} GiB of available memory, {_available_gib():.1f} free")
    big = large.big_input(CASE, jax.devices("cpu")[0], random=False)
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


def test_fp8_block_rowwise_and_colwise(x):
    large.check_fp8_block_rowwise_and_colwise(x, CASE)


def test_grouped_fp8_block_offsets_past_2_31(x):
    large.check_grouped_fp8_block_offsets_past_2_31(x, CASE)
