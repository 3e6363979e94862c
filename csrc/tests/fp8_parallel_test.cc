// Host test: the FP8 CPU kernel (fp8/quantize_cpu.h) gives the same bytes
// serially and split over 2, 3 and 8 threads (and with its tasks run in
// reverse order): rowwise (flat ranges), transposed (row range x column
// panel), current scaling's amax pass, dbias (column ranges, split nodes,
// dbias_cast) and batches of small examples (whole examples per task).
// Not part of the library; tests/kernels/test_host_cpp.py builds and runs
// it, or by hand from the repository root (the kernel is compiled into this
// file, so the test needs no other source):
//
//   g++ -std=c++17 -O2 -ffp-contract=off -Wall -Wextra -I csrc
//       csrc/tests/fp8_parallel_test.cc -o /tmp/fp8_parallel_test
//   /tmp/fp8_parallel_test

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/fp8_quantize_problem.h"
#include "common/parallel_for.h"
#include "fp8/quantize_cpu.cc"  // NOLINT: the kernel itself, see above
#include "tests/host_test_expect.h"
#include "tests/parallel_test_pools.h"

namespace {

using eqx_quant::Fp8QuantizeBuffers;
using eqx_quant::Fp8QuantizeProblem;
using eqx_quant::InputType;
using eqx_quant::ParallelFor;
using eqx_quant::host_test::checks;
using eqx_quant::host_test::failures;

// All outputs of one call.
struct Outputs {
  std::vector<uint8_t> row, col;
  std::vector<float> scale_inv, amax, dbias;
  std::vector<uint8_t> dbias_cast;
};

Outputs Run(const Fp8QuantizeProblem& p, const std::vector<uint8_t>& x,
            const std::vector<float>& scale, const ParallelFor& parallel) {
  const int64_t elements = p.batch * p.rows * p.cols;
  Outputs out;
  out.row.assign(p.rowwise ? elements : 0, 0xAB);
  out.col.assign(p.colwise ? elements : 0, 0xAB);
  out.scale_inv.assign(p.batch, -1.0f);
  out.amax.assign(p.batch, -1.0f);
  const int64_t kept = p.batch * p.dbias_kept_rows * p.cols;
  out.dbias.assign(p.with_dbias ? kept * p.dbias_split : 0, -1.0f);
  const int64_t in_bytes = p.input_type == InputType::kF32 ? 4 : 2;
  out.dbias_cast.assign(p.dbias_cast ? kept * in_bytes : 0, 0xAB);
  Fp8QuantizeBuffers b;
  b.x = x.data();
  b.scale = scale.data();
  b.row = out.row.data();
  b.col = out.col.data();
  b.scale_inv = out.scale_inv.data();
  b.amax = out.amax.data();
  b.dbias = out.dbias.data();
  b.dbias_cast = out.dbias_cast.data();
  eqx_quant::cpu::Fp8Quantize(p, b, parallel);
  return out;
}

template <typename T>
bool SameBytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

void Check(const char* name, Fp8QuantizeProblem p, std::mt19937_64& rng) {
  const bool f32 = p.input_type == InputType::kF32;
  const std::vector<uint8_t> x =
      eqx_quant::host_test::RandomInput(rng, p.batch * p.rows * p.cols, f32);
  std::vector<float> scale(static_cast<size_t>(p.batch));
  for (int64_t b = 0; b < p.batch; ++b) scale[b] = 0.75f + 0.5f * b;
  const Outputs want = Run(p, x, scale, ParallelFor());
  for (const ParallelFor& parallel : eqx_quant::host_test::TestBackends()) {
    const Outputs got = Run(p, x, scale, parallel);
    const int64_t n = parallel.threads();
    EXPECT(SameBytes(got.row, want.row), "%s, %" PRId64 " threads: row", name,
           n);
    EXPECT(SameBytes(got.col, want.col), "%s, %" PRId64 " threads: col", name,
           n);
    EXPECT(SameBytes(got.scale_inv, want.scale_inv),
           "%s, %" PRId64 " threads: scale_inv", name, n);
    EXPECT(SameBytes(got.amax, want.amax), "%s, %" PRId64 " threads: amax",
           name, n);
    EXPECT(SameBytes(got.dbias, want.dbias), "%s, %" PRId64 " threads: dbias",
           name, n);
    EXPECT(SameBytes(got.dbias_cast, want.dbias_cast),
           "%s, %" PRId64 " threads: dbias_cast", name, n);
  }
}

Fp8QuantizeProblem Problem(InputType type, int64_t batch, int64_t rows,
                           int64_t cols, bool rowwise, bool colwise,
                           bool current) {
  Fp8QuantizeProblem p;
  p.input_type = type;
  p.batch = batch;
  p.rows = rows;
  p.cols = cols;
  p.rowwise = rowwise;
  p.colwise = colwise;
  p.scale_from_amax = current;
  return p;
}

void TestAll() {
  std::mt19937_64 rng(57);
  for (InputType type : {InputType::kBF16, InputType::kF32}) {
    for (bool current : {false, true}) {
      // Rowwise: flat ranges (one long row, too).
      Check("rowwise", Problem(type, 1, 517, 999, true, false, current), rng);
      Check("one row", Problem(type, 1, 1, 300001, true, false, current), rng);
      // Transposed: row ranges x column panels (cols > one panel).
      Check("rowcol", Problem(type, 1, 700, 2100, true, true, current), rng);
      Check("col", Problem(type, 2, 333, 777, false, true, current), rng);
      // Small examples, several per task.
      Check("batch", Problem(type, 37, 31, 53, true, true, current), rng);
      // dbias over the rows, node sums of a split axis, the cast.
      Fp8QuantizeProblem d = Problem(type, 2, 384, 1500, true, true, current);
      d.with_dbias = true;
      d.dbias_kept_rows = 2;
      d.dbias_reduced_dims = {96, 2};
      d.dbias_split = 4;
      d.dbias_cast = true;
      Check("dbias split", d, rng);
      Fp8QuantizeProblem e = Problem(type, 1, 1001, 4133, true, false, current);
      e.with_dbias = true;
      e.dbias_reduced_dims = {1001};
      Check("dbias rowwise", e, rng);
      // dbias only (the MXFP8 op's form), no FP8 output.
      Fp8QuantizeProblem f = Problem(type, 1, 640, 3000, false, false, false);
      f.with_dbias = true;
      f.dbias_reduced_dims = {640};
      f.dbias_split = 64;
      Check("dbias only", f, rng);
    }
  }
}

}  // namespace

int main() {
  TestAll();
  std::printf("fp8_parallel_test: %" PRId64 " checks, %d failures\n", checks,
              failures);
  return failures == 0 ? 0 : 1;
}
