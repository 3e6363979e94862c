// Host test: the MXFP8 CPU kernel (mxfp8/quantize_cpu.h) gives the same bytes
// serially and split over 2, 3 and 8 threads (and with its tasks run in
// reverse order): rowwise only (ranges of lines) and colwise with or without
// rowwise (ranges of 32-row tiles; short lines several per tile, long lines
// in pieces; partial blocks both ways). Not part of the library;
// tests/kernels/test_host_cpp.py builds and runs it, or by hand from the
// repository root (the kernel is compiled into this file):
//
//   g++ -std=c++17 -O2 -ffp-contract=off -Wall -Wextra -I csrc
//       csrc/tests/mxfp8_parallel_test.cc -o /tmp/mxfp8_parallel_test
//   /tmp/mxfp8_parallel_test

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "common/mxfp8_problem.h"
#include "common/parallel_for.h"
#include "mxfp8/quantize_cpu.cc"  // NOLINT: the kernel itself, see above
#include "tests/host_test_expect.h"
#include "tests/parallel_test_pools.h"

namespace {

using eqx_quant::InputType;
using eqx_quant::Mxfp8Blocks;
using eqx_quant::Mxfp8QuantizeBuffers;
using eqx_quant::Mxfp8QuantizeProblem;
using eqx_quant::ParallelFor;
using eqx_quant::host_test::checks;
using eqx_quant::host_test::failures;

struct Outputs {
  std::vector<uint8_t> row, row_scale, col, col_scale;
  bool operator==(const Outputs& o) const {
    return row == o.row && row_scale == o.row_scale && col == o.col &&
           col_scale == o.col_scale;
  }
};

Outputs Run(const Mxfp8QuantizeProblem& p, const std::vector<uint8_t>& x,
            const ParallelFor& parallel) {
  const int64_t lines = p.outer * p.blocked * p.inner;
  Outputs out;
  out.row.assign(p.rowwise ? lines * p.last : 0, 0xAB);
  out.row_scale.assign(p.rowwise ? lines * Mxfp8Blocks(p.last) : 0, 0xAB);
  out.col.assign(p.colwise ? lines * p.last : 0, 0xAB);
  out.col_scale.assign(
      p.colwise ? p.outer * Mxfp8Blocks(p.blocked) * p.inner * p.last : 0,
      0xAB);
  Mxfp8QuantizeBuffers b;
  b.x = x.data();
  b.row = out.row.data();
  b.row_scale = out.row_scale.data();
  b.col = out.col.data();
  b.col_scale = out.col_scale.data();
  eqx_quant::cpu::Mxfp8Quantize(p, b, parallel);
  return out;
}

void Check(InputType type, int64_t outer, int64_t blocked, int64_t inner,
           int64_t last, bool rowwise, bool colwise, std::mt19937_64& rng) {
  Mxfp8QuantizeProblem p;
  p.input_type = type;
  p.outer = outer;
  p.blocked = blocked;
  p.inner = inner;
  p.last = last;
  p.rowwise = rowwise;
  p.colwise = colwise;
  const std::vector<uint8_t> x = eqx_quant::host_test::RandomInput(
      rng, outer * blocked * inner * last, type == InputType::kF32);
  const Outputs want = Run(p, x, ParallelFor());
  for (const ParallelFor& parallel : eqx_quant::host_test::TestBackends()) {
    EXPECT(Run(p, x, parallel) == want,
           "(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
           ") rowwise=%d colwise=%d, %" PRId64 " threads",
           outer, blocked, inner, last, rowwise, colwise, parallel.threads());
  }
}

void TestAll() {
  std::mt19937_64 rng(5757);
  for (InputType type : {InputType::kBF16, InputType::kF32}) {
    Check(type, 1, 1000, 1, 1000, true, false, rng);  // lines, partial block
    Check(type, 1, 1, 1, 200000, true, false, rng);   // one long line
    Check(type, 1, 1024, 1, 1024, true, true, rng);   // whole tiles
    Check(type, 2, 300, 3, 700, true, true, rng);     // long L, partial tiles
    Check(type, 3, 333, 17, 40, false, true, rng);    // short L, lines per tile
    Check(type, 1, 2048, 1, 96, true, true, rng);     // narrow, many block rows
  }
}

}  // namespace

int main() {
  TestAll();
  std::printf("mxfp8_parallel_test: %" PRId64 " checks, %d failures\n", checks,
              failures);
  return failures == 0 ? 0 : 1;
}
