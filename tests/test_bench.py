"""`python -m eqx_quant.bench` runs on CPU (a smoke run: speed is measured on the GPU, never in
tests) and writes the rows it promises, grouped cases included."""

import json

from eqx_quant import bench


def test_bench_runs_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    ops = [
        "current_row",
        "mxfp8_rowcol",
        "mxfp8_dbias_row",
        "mxfp8_dbias_rowcol",
        "grouped_mxfp8_rowcol",
        "grouped_dbias",
    ]
    assert bench.main(["--sizes", "128x64", "--reps", "1", "--ops", *ops, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [r["op"] for r in result["rows"]] == ops
    for row in result["rows"]:
        assert row["shape"] == [128, 64]
        assert row["ours_us"] > 0 and row["xla_us"] > 0 and row["bytes"] > 128 * 64 * 2
    assert result["copy_gbps"] > 0


def test_grouped_bench_sizes_are_ragged_and_sum_to_m():
    for m in (128, 16384):
        sizes = bench._bench_grouped.group_sizes(m)
        assert len(sizes) == 8 and sizes.sum() == m and (sizes >= 0).all()
    assert (bench._bench_grouped.group_sizes(16384) % 32 != 0).any()
