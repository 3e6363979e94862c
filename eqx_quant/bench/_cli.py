"""The command line of `python -m eqx_quant.bench`."""

import argparse
import json
import sys

from . import __doc__ as _DESCRIPTION
from ._gemm import (
    DEFAULT_GEMM_GROUPS,
    DEFAULT_GEMM_SIZES,
    GEMM_OPS,
    parse_gemm_size,
    run_gemm_benchmark,
)
from ._quantize import DEFAULT_SIZES, OPS, parse_size, run_benchmark
from ._timing import EVENT_OPS_PER_CALL


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eqx_quant.bench", description=_DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=list(DEFAULT_SIZES), type=str,
                        help="N (for NxN) or MxN, bf16 (default: %(default)s)")
    parser.add_argument("--reps", type=int, default=7,
                        help="timed calls per measurement: CUDA events, each call brackets up "
                        f"to {EVENT_OPS_PER_CALL} ops; wall clock, each call is a batch of "
                        "dispatches (the median is reported)")
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    parser.add_argument("--gemms", action="store_true",
                        help="time eqx_quant's GEMMs and layers against bf16 XLA instead "
                        "(eqx_quant/bench/_gemm.py)")
    parser.add_argument("--gemm-sizes", nargs="+", default=list(DEFAULT_GEMM_SIZES), type=str,
                        help="with --gemms: N (M = K = N) or MxKxN (default: %(default)s)")
    parser.add_argument("--gemm-ops", nargs="+", default=list(GEMM_OPS), choices=GEMM_OPS)
    parser.add_argument("--gemm-groups", nargs="+", default=list(DEFAULT_GEMM_GROUPS),
                        help="with --gemms: the grouped ops' groups, G (even) or zipfG "
                        "(skewed) (default: %(default)s)")
    parser.add_argument("--json", help="write the results to this file (rewritten after every "
                        "row, with \"complete\": false until the run ends)")
    args = parser.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes]
    command = " ".join(["python -m eqx_quant.bench"] + list(sys.argv[1:] if argv is None else argv))

    def write(result: dict, complete: bool) -> None:
        with open(args.json, "w") as f:
            json.dump(dict(result, command=command, complete=complete), f, indent=2)

    # With --json the file is rewritten after every row ("complete": false until the end), so
    # a run stopped part way (a timeout on a lent GPU) keeps the rows it measured.
    on_row = (lambda result: write(result, False)) if args.json else None
    if args.gemms:
        gemm_sizes = [parse_gemm_size(s) for s in args.gemm_sizes]
        result = run_gemm_benchmark(gemm_sizes, max(1, args.reps), tuple(args.gemm_ops),
                                    on_row=on_row, groups=tuple(args.gemm_groups))
    else:
        result = run_benchmark(sizes, max(1, args.reps), tuple(args.ops), on_row=on_row)
    if args.json:
        write(result, True)
    return 0

