"""Compile and run the standalone host C++ tests, `csrc/tests/*_test.cc`.

Each file is a `main()` that exits non-zero on failure; its header comment says how to build
it by hand. Here each one is built with the system C++ compiler into pytest's `tmp_path`,
with the header's flags (`COMMON_FLAGS`, plus the entries of `BUILDS` for files that need
more sources or other flags), then run. A new `*_test.cc` is picked up by the glob; give it
a `BUILDS` entry only if the common flags cannot build it.

The exhaustive reciprocal test has no smaller mode and is skipped (`TOO_SLOW`).
"""

import dataclasses
import pathlib
import shutil
import subprocess

import pytest

from tests.support.paths import REPO

ROOT = REPO
CSRC = ROOT / "csrc"
HOST_TESTS = CSRC / "tests"
TESTS = sorted(path.name for path in HOST_TESTS.glob("*_test.cc"))
CXX = shutil.which("c++") or shutil.which("g++")
COMPILE_TIMEOUT_S = 300
RUN_TIMEOUT_S = 300
OUTPUT_TAIL_LINES = 40

COMMON_FLAGS = ("-std=c++17", "-O2", "-ffp-contract=off", "-Wall", "-Wextra")


@dataclasses.dataclass(frozen=True)
class Build:
    """How to build one test: extra sources (relative to `csrc`) and flags after the common."""

    sources: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()


BUILDS = {
    # Sweeps every 7th of the 2^32 float32 patterns per format (`full`, by hand, all of
    # them); -O3 lets the compiler vectorise the scalar side (about half the time of -O2's).
    "fp8_cast_avx2_test.cc": Build(flags=("-O3",)),
    # Links the CPU kernels, under ASan + UBSan. The header says -O1 -g; -O0 compiles several
    # times faster, and the sanitizers see at least as much. -fno-sanitize-recover makes a
    # UBSan report fail the run (by default it prints and carries on, exiting 0).
    "grouped_quantize_cpu_test.cc": Build(
        sources=(
            "grouped/quantize_cpu.cc",
            "fp8/quantize_cpu.cc",
            "mxfp8/quantize_cpu.cc",
            "nvfp4/amax_cpu.cc",
            "nvfp4/quantize_cpu.cc",
        ),
        flags=("-O0", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"),
    ),
}

# Tests with no smaller mode that take too long for CI. The reasons must not say "cuda":
# conftest.py turns such skips into errors under EQX_QUANT_REQUIRE_CUDA=1.
TOO_SLOW = {
    "grouped_rcp_cuda_test.cc": (
        "exhaustive over all 2^32 floats: about 3 min 15 s on a 2-core machine; "
        "build and run it by hand as its header says"
    ),
}

pytestmark = [
    pytest.mark.skipif(CXX is None, reason="no C++ compiler (c++ or g++) on PATH"),
    pytest.mark.long,
]


def _tail(text: str) -> str:
    return "\n".join(text.splitlines()[-OUTPUT_TAIL_LINES:])


def compile_and_run(source: pathlib.Path, out_dir: pathlib.Path) -> None:
    """Build `source` (a `*_test.cc`) into `out_dir` and run it; `pytest.fail` on failure.

    **Arguments:**

    - `source`: the test's path. Its `BUILDS` entry, if any, is looked up by file name, and
        its extra sources are taken from `csrc`.
    - `out_dir`: where the binary goes.
    """
    assert CXX is not None
    build = BUILDS.get(source.name, Build())
    binary = out_dir / source.stem
    command = [
        CXX,
        *COMMON_FLAGS,
        *build.flags,
        f"-I{ROOT / 'csrc'}",
        str(source),
        *(str(CSRC / extra) for extra in build.sources),
        "-o",
        str(binary),
    ]
    for what, args, timeout in (
        ("compiling", command, COMPILE_TIMEOUT_S),
        ("running", [str(binary)], RUN_TIMEOUT_S),
    ):
        try:
            result = subprocess.run(
                args,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as error:
            output = error.output or ""
            if isinstance(output, bytes):
                output = output.decode(errors="replace")
            pytest.fail(
                f"{what} {source.name} timed out after {timeout} s: {' '.join(args)}\n"
                f"{_tail(output)}",
                pytrace=False,
            )
        if result.returncode != 0:
            pytest.fail(
                f"{what} {source.name} failed with exit code {result.returncode}: "
                f"{' '.join(args)}\n{_tail(result.stdout)}",
                pytrace=False,
            )


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.skip(reason=TOO_SLOW[name]))
        if name in TOO_SLOW
        else name
        for name in TESTS
    ],
)
def test_host_cpp(name: str, tmp_path: pathlib.Path):
    compile_and_run(HOST_TESTS / name, tmp_path)
