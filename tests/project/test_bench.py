"""`python -m eqx_quant.bench` runs on CPU (a smoke run: speed is measured on the GPU, never in
tests) and writes the rows it promises, grouped cases included."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from eqx_quant import bench
from eqx_quant.bench import _gemm as _bench_gemm
from eqx_quant.bench import _grouped as _bench_grouped
from eqx_quant.bench import _quantize, _xla
from tests.support.bytes import u8


def test_bench_runs_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    ops = [
        "current_row",
        "mxfp8_rowcol",
        "mxfp8_dbias_row",
        "mxfp8_dbias_rowcol",
        "nvfp4_2d_rowcol",
        "grouped_mxfp8_rowcol",
        "grouped_nvfp4_rowcol",
        "grouped_nvfp4_sr_rowcol",
        "grouped_dbias",
        "mxfp8_dequant_row",
        "nvfp4_dequant_row",
    ]
    assert bench.main(["--sizes", "128x64", "--reps", "1", "--ops", *ops, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [r["op"] for r in result["rows"]] == ops
    for row in result["rows"]:
        assert row["shape"] == [128, 64]
        assert row["ours_us"] > 0 and row["xla_us"] > 0 and row["bytes"] > 128 * 64 * 2
    assert result["copy_gbps"] > 0
    assert result["complete"] is True


def test_bench_json_keeps_the_rows_of_a_run_stopped_part_way(tmp_path, monkeypatch):
    # A run stopped after its second row (as a timeout would) leaves a JSON file with the
    # rows measured so far, marked incomplete.
    out = tmp_path / "bench.json"
    real_measure = _quantize.measure
    calls = []

    def measure_then_stop(*args, **kwargs):
        calls.append(None)
        if len(calls) > 5:  # the copy bandwidth, then two ops of two measurements each
            raise KeyboardInterrupt("stopped")
        return real_measure(*args, **kwargs)

    monkeypatch.setattr(_quantize, "measure", measure_then_stop)
    ops = ["delayed_row", "mxfp8_row", "nvfp4_row"]
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--sizes", "128x64", "--reps", "1", "--ops", *ops, "--json", str(out)])
    result = json.loads(out.read_text())
    assert result["complete"] is False
    assert [r["op"] for r in result["rows"]] == ops[:2]
    assert all(r["ours_us"] > 0 for r in result["rows"])
    assert "--json" in result["command"]


def test_grouped_bench_sizes_are_ragged_and_sum_to_m():
    for m in (128, 16384):
        sizes = _bench_grouped.group_sizes(m)
        assert len(sizes) == 8 and sizes.sum() == m and (sizes >= 0).all()
    assert (_bench_grouped.group_sizes(16384) % 32 != 0).any()


def _bits(a):
    if a.dtype == jnp.float4_e2m1fn:
        a = a.astype(jnp.float32)  # exact, the sign of zero kept
    return u8(a)


def test_hand_written_nvfp4_versions_compute_the_same_op():
    """The benchmark's jnp versions of the NVFP4 2D and grouped ops give our op's values (on
    inputs without NaN / subnormal corner cases), so the speedups compare like with like. On
    the CPU: XLA on a GPU divides inexactly, so there the jnp versions
    are the same op up to the last bit of some scales."""
    with jax.default_device(jax.devices("cpu")[0]):
        _check_hand_written_nvfp4()


def _check_hand_written_nvfp4():
    x = (jax.random.normal(jax.random.key(3), (256, 128)) * 3).astype(jnp.bfloat16)
    ours = _quantize._ours("nvfp4_2d_rowcol")(x, None)
    xla = _xla.xla("nvfp4_2d_rowcol")(x, None)
    pairs = [(ours.rowwise.data, xla["row"]), (ours.rowwise.scale_inv, xla["row_scale"]),
             (ours.colwise.data, xla["col"]), (ours.colwise.scale_inv, xla["col_scale"])]
    grouped = _bench_grouped
    ours = grouped.ours("grouped_nvfp4_rowcol", 256)(x, None)
    xla = grouped.xla("grouped_nvfp4_rowcol", 256, 128)(x, None)
    pairs += [(ours.rowwise.data, xla["row"]), (ours.rowwise.scale_inv, xla["row_scale"])]
    for i, (a, b) in enumerate(pairs):
        assert a.shape == b.shape, i
        np.testing.assert_array_equal(_bits(a), _bits(b), err_msg=str(i))


@pytest.mark.skipif(jax.default_backend() != "cpu",
                    reason="a CPU smoke run; on a GPU, python -m eqx_quant.bench --gemms is run")
@pytest.mark.long
def test_gemm_bench_runs_and_writes_json(tmp_path):
    out = tmp_path / "gemm.json"
    # Every op at 128x64x96; at 64x32x48 (K = 32, N = 48) the MXFP8 ops, which need multiples
    # of 32, are skipped, and one other op runs. The Pallas peer needs a GPU: skipped here.
    mxfp8_ops = [op for op in bench.GEMM_OPS if "mxfp8" in op]
    small = ["--gemm-sizes", "64x32x48", "--gemm-ops", "fp8_gemm", *mxfp8_ops]
    assert bench.main(["--gemms", *small, "--reps", "1", "--json", str(out)]) == 0
    assert [(r["op"], r["shape"]) for r in json.loads(out.read_text())["gemm_rows"]] == [
        ("fp8_gemm", [64, 32, 48])
    ]
    args = ["--gemms", "--gemm-sizes", "128x64x96", "--reps", "1", "--json", str(out)]
    assert bench.main(args) == 0
    result = json.loads(out.read_text())
    assert result["complete"] is True and "rows" not in result
    cpu_ops = [op for op in bench.GEMM_OPS if op != "pallas_grouped_gemm"]
    want = [(op, [128, 64, 96]) for op in cpu_ops]
    assert [(r["op"], r["shape"]) for r in result["gemm_rows"]] == want
    for row in result["gemm_rows"]:
        m, k, n = row["shape"]
        per = 6 if row["op"].endswith("dense_step") else 2
        assert row["flops"] == per * m * k * n
        assert row["ours_us"] > 0 and row["xla_us"] > 0
        assert row["ours_tflops"] == pytest.approx(row["flops"] / row["ours_us"] / 1e6)


def _sqnr_db(got, want) -> float:
    got, want = (np.asarray(jnp.asarray(a, jnp.float32), np.float64) for a in (got, want))
    noise = np.sum((got - want) ** 2)
    if noise == 0:  # the same product exactly (the bf16 grouped GEMM on CPU)
        return float("inf")
    return float(10 * np.log10(np.sum(want**2) / noise))


@pytest.mark.parametrize("op", _bench_gemm.GEMM_OPS)
def test_gemm_bench_times_the_same_product_as_its_bf16_version(op):
    # What each row times: our op and its bf16 version compute the same product (up to the
    # quantization's error), on the first rotated input.
    why_not = _bench_gemm._applies(op, 96, 64, 128)
    if why_not is not None:
        pytest.skip(why_not)
    ours, ours_xs, ours_shared, xla, xla_xs, xla_shared, _ = _bench_gemm.gemm_case(op, 96, 64, 128)
    got = jax.tree.leaves(jax.jit(ours)(ours_xs[0], *ours_shared))
    want = jax.tree.leaves(jax.jit(xla)(xla_xs[0], *xla_shared))
    assert len(got) == len(want) == (3 if op.endswith("dense_step") else 1)
    floor = 12.0 if "nvfp4" in op else 20.0  # dB; E5M2 gradients in the dense step
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype == jnp.bfloat16
        assert _sqnr_db(g, w) > floor, (op, _sqnr_db(g, w))


def test_fp8_block_rows_run_and_their_hand_written_version_computes_the_same_op(tmp_path):
    """The FP8 block rows (ours: eqx_quant.quantize with impl='auto'; XLA: plain jnp with
    power-of-two scales) on normal inputs give the same bytes, so the speedup compares like
    with like."""
    out = tmp_path / "bench.json"
    ops = ["fp8_block_row", "fp8_block_rowcol", "fp8_block_2d_rowcol"]
    assert bench.main(["--sizes", "256x384", "--reps", "1", "--ops", *ops, "--json", str(out)]) == 0
    assert [r["op"] for r in json.loads(out.read_text())["rows"]] == ops
    with jax.default_device(jax.devices("cpu")[0]):
        x = (jax.random.normal(jax.random.key(5), (256, 384)) * 3).astype(jnp.bfloat16)
        for op in ops:
            ours = _quantize._ours(op)(x, None)
            xla = _xla.xla(op)(x, None)
            pairs = [(ours.rowwise.data, xla["row"]), (ours.rowwise.scale_inv, xla["row_scale"])]
            if op.endswith("rowcol"):
                pairs += [(ours.colwise.data, xla["col"]),
                          (ours.colwise.scale_inv, xla["col_scale"])]
            for i, (a, b) in enumerate(pairs):
                np.testing.assert_array_equal(_bits(a), _bits(b), err_msg=f"{op} {i}")


def test_hand_written_dequantize_versions_compute_the_same_op():
    """The bench's jnp dequantize rows give ours' values: MXFP8 exactly (payload times a power
    of two), NVFP4 within one bfloat16 rounding (its two multiplies in another order)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from eqx_quant.bench import _quantize, _xla

    x = jax.random.normal(jax.random.key(3), (64, 96), jnp.float32).astype(jnp.bfloat16)
    for op in _quantize.DEQUANTIZE_OPS:
        (part,) = _quantize._parts(op, [x])
        ours = np.asarray(_quantize._ours(op)(part, None), np.float32)
        theirs = np.asarray(_xla.xla(op)(part, None), np.float32)
        if op.startswith("mxfp8"):
            np.testing.assert_array_equal(ours, theirs)
        else:
            np.testing.assert_allclose(ours, theirs, rtol=2.0**-8, atol=0)
        assert np.abs(ours - np.asarray(x, np.float32)).max() < 0.5 * np.abs(ours).max()


def test_hand_written_grouped_fp8_block_version_computes_the_same_op():
    """The bench's jnp grouped 1x128 version (rowwise dense; colwise through a group-aligned
    buffer and a gather) gives ours' bytes and scales on ragged groups."""
    with jax.default_device(jax.devices("cpu")[0]):
        m, n = 512, 256
        x = (jax.random.normal(jax.random.key(7), (m, n)) * 3).astype(jnp.bfloat16)
        op = "grouped_fp8_block_rowcol"
        ours = _bench_grouped.ours(op, m)(x, None)
        xla = _bench_grouped.xla(op, m, n)(x, None)
        used = xla["col_scale"].shape[1]
        pairs = [(ours.rowwise.data, xla["row"]), (ours.rowwise.scale_inv, xla["row_scale"]),
                 (ours.colwise.data, xla["col"]),
                 (ours.colwise.scale_inv[:, :used], xla["col_scale"])]
        for i, (a, b) in enumerate(pairs):
            assert a.shape == b.shape, (i, a.shape, b.shape)
            np.testing.assert_array_equal(_bits(a), _bits(b), err_msg=str(i))
        assert not np.asarray(ours.colwise.scale_inv[:, used:]).any()
