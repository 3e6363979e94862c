"""Run every script in examples/ as a user would, and check what the quick start reports.

Each script runs in a fresh interpreter (`sys.executable`) on CPU, so the examples cannot
drift from the library unnoticed. The quick start prints one row per scaling mode; the
bounds below were measured on its fixed-seed 1024x1024 bf16 input with some headroom:
e4m3 current/delayed scaling and MXFP8 ~31.6 dB, e5m2 ~25.6 dB, NVFP4 ~20.7 dB (2D ~17.8,
stochastic rounding ~17.3); at most a few clipped elements in 10^4.
"""

import functools
import json
import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

from tests.support.paths import EXAMPLES, README, REPO

# The char-LM run takes arguments (--out) and has its own test below.
CHAR_LM = EXAMPLES / "train_char_lm.py"
SCRIPTS = sorted(p for p in EXAMPLES.glob("*.py") if p != CHAR_LM)
TIMEOUT_S = 600

# (mode, q_dtype) -> lowest acceptable SQNR in dB. Rows the quick start adds later (e.g.
# MXFP8, NVFP4) are held to the generic bound until they get their own entry here.
SQNR_MIN_DB = {
    ("current", "float8_e4m3fn"): 28.0,
    ("current", "float8_e5m2"): 22.0,
    ("delayed", "float8_e4m3fn"): 28.0,
    ("mxfp8", "float8_e4m3fn"): 28.0,
    ("mxfp8", "float8_e5m2"): 22.0,
    ("nvfp4", "float4_e2m1fn"): 18.0,
    ("nvfp4_2d", "float4_e2m1fn"): 15.0,
    ("nvfp4_sr", "float4_e2m1fn"): 15.0,
}
# Rows whose rowwise and colwise copies are quantized along different blocks print "-".
INDEPENDENT_COPIES = {"mxfp8", "nvfp4", "nvfp4_sr"}
GENERIC_SQNR_MIN_DB = 10.0
MAX_SATURATED_FRACTION = 1e-3
# NVFP4 rounds each E4M3 block scale to nearest (as TE's kernels do), so in about half of
# the blocks the block max lands slightly above 6 and is clipped: up to 1 element in 16.
NVFP4_MAX_CLIPPED_FRACTION = 1 / 16
# Largest |x - dequantize(q(x))| allowed, small next to the input's amax (~156). SR moves a
# value to either grid neighbour, so its error is only below one grid step: up to 2 block
# scales in E2M1's top binade [4, 6], about amax / 3 = 52 in the block of the largest spike
# (a spike at 5.8 block scales rounds down to 4 with probability 0.1; RN's error is half).
MAX_ABS_ERR = {("nvfp4_sr", "float4_e2m1fn"): 60.0}
GENERIC_MAX_ABS_ERR = 20.0


@functools.cache
def _run(script: pathlib.Path) -> subprocess.CompletedProcess:
    """Run a script once per test session (the quick start's output feeds several tests)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def _check_ok(script: pathlib.Path, proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (
        f"{script.name} exited with {proc.returncode}.\n--- stdout ---\n{proc.stdout[-4000:]}"
        f"\n--- stderr ---\n{proc.stderr[-4000:]}"
    )


@pytest.fixture
def quickstart_output() -> str:
    script = EXAMPLES / "quickstart.py"
    proc = _run(script)
    _check_ok(script, proc)
    return proc.stdout


def _parse_rows(stdout: str) -> dict[tuple[str, str], dict]:
    """The table rows after the header line that starts with `mode`."""
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["mode", "q_dtype"])
    columns = lines[header].split()
    rows = {}
    for line in lines[header + 1 :]:
        fields = line.split()
        if not fields:
            continue
        assert len(fields) == len(columns), f"malformed row {line!r} for columns {columns}"
        row = dict(zip(columns, fields))
        key = (row["mode"], row["q_dtype"])
        assert key not in rows, f"duplicate row {key}"
        rows[key] = dict(
            sqnr_db=float(row["SQNR_dB"]),
            max_abs_err=float(row["max_abs_err"]),
            saturated=float(row["saturated"]),
            agree=row["rowwise==colwise"],
        )
    return rows


def test_every_example_has_its_test():
    """Each example runs in exactly one test process: the test that checks its output (a
    second, output-blind run would repeat it on another pytest-xdist worker). A new example
    gets its test here."""
    tested = {"quickstart.py", "block_formats.py", "grouped_moe.py", "fp8_training.py"}
    assert {p.name for p in SCRIPTS} == tested, "add a test for the new example"


def test_quickstart_has_every_mode(quickstart_output):
    rows = _parse_rows(quickstart_output)
    missing = set(SQNR_MIN_DB) - set(rows)
    assert not missing, f"quick start rows missing: {sorted(missing)}\n{quickstart_output}"


def test_quickstart_numbers(quickstart_output):
    rows = _parse_rows(quickstart_output)
    assert rows, f"no rows parsed from:\n{quickstart_output}"
    for key, row in rows.items():
        bound = SQNR_MIN_DB.get(key, GENERIC_SQNR_MIN_DB)
        assert math.isfinite(row["sqnr_db"]) and row["sqnr_db"] > bound, (key, row, bound)
        # Nonzero (FP8 is lossy) and small next to the input's amax (~156).
        err_bound = MAX_ABS_ERR.get(key, GENERIC_MAX_ABS_ERR)
        assert math.isfinite(row["max_abs_err"]) and 0.0 < row["max_abs_err"] < err_bound, (
            key, row)
        clip_bound = (
            NVFP4_MAX_CLIPPED_FRACTION if key[0].startswith("nvfp4") else MAX_SATURATED_FRACTION
        )
        assert 0.0 <= row["saturated"] <= clip_bound, (key, row)
        expected = "-" if key[0] in INDEPENDENT_COPIES else "True"
        assert row["agree"] == expected, (key, row)


def test_block_formats_example():
    script = EXAMPLES / "block_formats.py"
    proc = _run(script)
    _check_ok(script, proc)
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["format"])
    rows = {f[0]: [float(v) for v in f[1:]] for f in (l.split() for l in lines[header + 1 :]) if f}
    assert set(rows) == {"mxfp8_e4m3", "nvfp4", "nvfp4_rht"}, proc.stdout
    # MXFP8 (8-bit payload) is several dB better than NVFP4 (4-bit), on every measure.
    assert rows["mxfp8_e4m3"][0] > rows["nvfp4"][0] + 3.0, proc.stdout
    assert rows["mxfp8_e4m3"][2] < rows["nvfp4"][2], proc.stdout
    for name, (sqnr, mae, rel) in rows.items():
        assert 15.0 < sqnr < 40.0 and 0.0 < mae < 0.5 and 0.0 < rel < 0.3, (name, proc.stdout)


def test_quickstart_e4m3_beats_e5m2(quickstart_output):
    # One more mantissa bit is worth ~6 dB when both formats cover the range.
    rows = _parse_rows(quickstart_output)
    e4m3 = rows[("current", "float8_e4m3fn")]["sqnr_db"]
    e5m2 = rows[("current", "float8_e5m2")]["sqnr_db"]
    assert 4.0 < e4m3 - e5m2 < 8.0, (e4m3, e5m2)


@pytest.mark.long
def test_grouped_moe_example():
    """Every expert of every mode matched its dense quantize (the script exits otherwise), with
    the accuracy of the dense formats and a dbias within bfloat16 rounding of segment_sum; the
    MXFP8 expert layer (grouped_dense) tracks the float32 layer."""
    script = EXAMPLES / "grouped_moe.py"
    proc = _run(script)
    _check_ok(script, proc)
    rows = [line for line in proc.stdout.splitlines() if "SQNR per expert" in line]
    assert [r.split()[0] for r in rows] == ["fp8", "mxfp8", "nvfp4"]
    for row, floor in zip(rows, (28.0, 28.0, 18.0)):
        values = row.split("(dB):")[1].split("|")[0].split()
        assert len(values) == 8 and min(float(v) for v in values) > floor, row
        assert float(row.rsplit(" ", 1)[1]) <= 2.0**-8, row
    # The MXFP8 expert layer against float32: E4M3 forward ~28.5 dB, E5M2 gradients ~24.5 dB
    # (two fewer significand bits), dbias a float32 sum (~130 dB).
    layer = next(line for line in proc.stdout.splitlines() if "expert layer" in line)
    fields = layer.split(":")[1].split()
    sqnr = dict(zip(fields[::2], map(float, fields[1::2])))
    assert sqnr["y"] > 26 and sqnr["dx"] > 22 and sqnr["dkernel"] > 22, layer
    assert sqnr["dbias"] > 100, layer


def test_fp8_training_example():
    """FP8 delayed scaling (every GEMM of eqx_quant.dense in FP8) trains as float32 does: the
    loss falls by over 5x and stays within 3% of float32's at every report; the first layer's
    scales start at 1 (the initial state) and then follow fp8_max / amax: inputs ~N(0, 1)
    (amax ~4.5 over 16k samples: 448 / 4.5), weights ~N(0, 1/64) (amax ~0.5), and output
    gradients (E5M2, 57344 / amax) well below 0.05, so that scale exceeds 1e6."""
    script = EXAMPLES / "fp8_training.py"
    proc = _run(script)
    _check_ok(script, proc)
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["step"])
    rows = [[float(v) for v in line.split()] for line in lines[header + 1 :] if line.strip()]
    assert [int(r[0]) for r in rows] == list(range(0, 301, 50)), proc.stdout
    for step, float_loss, fp8_loss, x_scale, w_scale, g_scale in rows:
        assert abs(fp8_loss - float_loss) <= 0.03 * float_loss, proc.stdout
        if step == 0:
            assert (x_scale, w_scale, g_scale) == (1.0, 1.0, 1.0), proc.stdout
        else:
            assert 60.0 < x_scale < 140.0 and 600.0 < w_scale < 1300.0, proc.stdout
            assert g_scale > 1e6, proc.stdout
    assert rows[-1][2] < rows[0][2] / 5, proc.stdout


@pytest.mark.long
def test_readme_snippets_run():
    """The README's Python blocks run in order in one fresh interpreter, and the GEMM lines
    give what their comments say (bfloat16[256, 128])."""
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 3, "the README lost its Python examples"
    code = "\n".join(blocks) + "\nprint(y.dtype, y.shape)\n"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-3:] == ["bfloat16", "(256,", "128)"], proc.stdout


@pytest.mark.long
def test_char_lm_fp8_tracks_bf16(tmp_path):
    """The README's main job (CI runs it whole), here its first half: every recipe from one
    initialisation. FP8 (delayed and current scaling), MXFP8 and FP8 block-scaled validation
    losses stay within 3% of bf16 at every evaluation; NVFP4 within 5%; the JSON and the figure
    are written."""
    proc = subprocess.run(
        [sys.executable, str(CHAR_LM), "--out", str(tmp_path), "--no-progress", "--steps", "60"],
        cwd=REPO, env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True, text=True,
        timeout=TIMEOUT_S,
    )
    _check_ok(CHAR_LM, proc)
    metrics = json.loads((tmp_path / "metrics.json").read_text())["recipes"]
    assert (tmp_path / "char_lm.png").stat().st_size > 10_000
    base = metrics["bf16"]["val_loss"]
    assert base[-1] < base[0] - 0.5, f"bf16 did not learn: {base}"
    bounds = (("delayed", 0.03), ("current", 0.03), ("mxfp8", 0.03), ("nvfp4", 0.05),
              ("fp8_block", 0.03))
    for name, bound in bounds:
        rel = [abs(a - b) / b for a, b in zip(metrics[name]["val_loss"], base, strict=True)]
        assert max(rel) < bound, f"{name}: relative gap to bf16 {max(rel):.4f} >= {bound}"
        assert metrics[name]["tokens_per_s"] > 0
    # delayed scaling's state moved off its initial scale of 1
    scales = metrics["delayed"]["scales"][-1]
    assert scales and all(s != 1.0 for s in scales.values()), scales
