// Host test: the NVFP4 CPU kernels (nvfp4/quantize_cpu.h) give the same bytes
// serially and split over 2, 3 and 8 threads (and with their tasks run in
// reverse order): the amax and RHT amax passes, and the quantize rowwise,
// colwise, with the RHT, stochastic rounding, 2D tiles, batches, and with
// odd line lengths (two codes per byte across items: the kernel stays on one
// thread). Not part of the library; tests/kernels/test_host_cpp.py builds and
// runs it, or by hand from the repository root (the kernels are compiled into
// this file):
//
//   g++ -std=c++17 -O2 -ffp-contract=off -Wall -Wextra -I csrc
//       csrc/tests/nvfp4_parallel_test.cc -o /tmp/nvfp4_parallel_test
//   /tmp/nvfp4_parallel_test

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/nvfp4_problem.h"
#include "common/parallel_for.h"
#include "nvfp4/amax_cpu.cc"      // NOLINT: the kernels themselves, see above
#include "nvfp4/quantize_cpu.cc"  // NOLINT
#include "tests/host_test_expect.h"
#include "tests/parallel_test_pools.h"

namespace {

using eqx_quant::InputType;
using eqx_quant::Nvfp4AmaxBuffers;
using eqx_quant::Nvfp4AmaxProblem;
using eqx_quant::Nvfp4QuantizeBuffers;
using eqx_quant::Nvfp4QuantizeProblem;
using eqx_quant::Nvfp4View;
using eqx_quant::ParallelFor;
using eqx_quant::host_test::checks;
using eqx_quant::host_test::failures;

constexpr uint32_t kSignMask = 0xA5C3u;

// S = shape (k_axis: the colwise-blocked dim, or -1), batch examples.
Nvfp4View View(InputType type, int64_t batch, std::vector<int64_t> shape,
               int64_t k_axis) {
  Nvfp4View v;
  v.input_type = type;
  v.batch = batch;
  v.shape = shape;
  v.k_axis = k_axis;
  const int n = static_cast<int>(shape.size());
  v.a = v.k = v.c = 1;
  v.l = shape[n - 1];
  for (int d = 0; d < n - 1; ++d) {
    if (k_axis < 0 || d < k_axis) {
      v.a *= shape[d];
    } else if (d == k_axis) {
      v.k = shape[d];
    } else {
      v.c *= shape[d];
    }
  }
  if (k_axis < 0) {  // no K: the rows are all "a"
    v.c = v.a;
    v.a = 1;
  }
  return v;
}

struct Outputs {
  std::vector<uint8_t> row, row_scale, col, col_scale;
  bool operator==(const Outputs& o) const {
    return row == o.row && row_scale == o.row_scale && col == o.col &&
           col_scale == o.col_scale;
  }
};

Outputs Run(const Nvfp4QuantizeProblem& p, const std::vector<uint8_t>& x,
            const std::vector<float>& amax, const std::vector<uint32_t>& key,
            const std::vector<int32_t>& offset, const ParallelFor& parallel) {
  const Nvfp4View& v = p.view;
  const int64_t elements = v.a * v.k * v.c * v.l;
  const int64_t codes = v.batch * elements;
  Outputs out;
  out.row.assign(p.rowwise ? (codes + 1) / 2 : 0, 0xAB);
  out.row_scale.assign(
      p.rowwise ? v.batch * v.a * v.k * v.c * ((v.l + 15) / 16) : 0, 0xAB);
  out.col.assign(p.colwise ? (codes + 1) / 2 : 0, 0xAB);
  out.col_scale.assign(
      p.colwise ? v.batch * v.c * v.l * v.a * ((v.k + 15) / 16) : 0, 0xAB);
  Nvfp4QuantizeBuffers b;
  b.x = x.data();
  b.amax = amax.data();
  b.col_amax = amax.data() + v.batch;
  b.key = key.data();
  b.offset = offset.data();
  b.row = out.row.data();
  b.row_scale = out.row_scale.data();
  b.col = out.col.data();
  b.col_scale = out.col_scale.data();
  eqx_quant::cpu::Nvfp4Quantize(p, b, parallel);
  return out;
}

void CheckQuantize(const char* name, const Nvfp4View& v, bool rowwise,
                   bool colwise, bool use_2d, bool rht, bool sr,
                   std::mt19937_64& rng) {
  Nvfp4QuantizeProblem p;
  p.view = v;
  p.rowwise = rowwise;
  p.colwise = colwise;
  p.use_2d = use_2d;
  p.use_rht = rht;
  p.rht_sign_mask = kSignMask;
  p.stochastic_rounding = sr;
  p.global_shape = v.shape;
  const int64_t elements = v.a * v.k * v.c * v.l;
  const std::vector<uint8_t> x = eqx_quant::host_test::RandomInput(
      rng, v.batch * elements, v.input_type == InputType::kF32);
  // Global amaxes of a tensor of values up to 2^13 (and one tiny one).
  std::vector<float> amax(static_cast<size_t>(2 * v.batch));
  for (size_t i = 0; i < amax.size(); ++i) {
    amax[i] = i == 1 ? 1e-3f : 8192.0f * (1.0f + 0.25f * i);
  }
  std::vector<uint32_t> key(static_cast<size_t>(2 * v.batch));
  for (size_t i = 0; i < key.size(); ++i) {
    key[i] = static_cast<uint32_t>(rng());
  }
  std::vector<int32_t> offset(v.shape.size(), 0);
  if (sr) offset[0] = 3;  // a shard not at the origin
  const Outputs want = Run(p, x, amax, key, offset, ParallelFor());
  for (const ParallelFor& parallel : eqx_quant::host_test::TestBackends()) {
    EXPECT(Run(p, x, amax, key, offset, parallel) == want,
           "quantize %s, %" PRId64 " threads", name, parallel.threads());
  }
}

void CheckAmax(const char* name, const Nvfp4View& v, bool rht,
               std::mt19937_64& rng) {
  Nvfp4AmaxProblem p;
  p.view = v;
  p.with_rht = rht;
  p.rht_sign_mask = kSignMask;
  const std::vector<uint8_t> x = eqx_quant::host_test::RandomInput(
      rng, v.batch * v.a * v.k * v.c * v.l, v.input_type == InputType::kF32);
  auto run = [&](const ParallelFor& parallel) {
    std::vector<float> out(static_cast<size_t>(2 * v.batch), -1.0f);
    Nvfp4AmaxBuffers b;
    b.x = x.data();
    b.amax = out.data();
    b.rht_amax = out.data() + v.batch;
    eqx_quant::cpu::Nvfp4Amax(p, b, parallel);
    return out;
  };
  const std::vector<float> want = run(ParallelFor());
  for (const ParallelFor& parallel : eqx_quant::host_test::TestBackends()) {
    const std::vector<float> got = run(parallel);
    EXPECT(std::memcmp(got.data(), want.data(), 4 * got.size()) == 0,
           "amax %s, %" PRId64 " threads", name, parallel.threads());
  }
}

void TestAll() {
  std::mt19937_64 rng(575757);
  for (InputType type : {InputType::kBF16, InputType::kF32}) {
    const Nvfp4View rows = View(type, 1, {300, 1000}, -1);
    CheckQuantize("rowwise", rows, true, false, false, false, false, rng);
    CheckQuantize("rowwise sr", rows, true, false, false, false, true, rng);
    const Nvfp4View square = View(type, 1, {512, 768}, 0);
    CheckQuantize("rowcol", square, true, true, false, false, false, rng);
    CheckQuantize("rowcol rht", square, true, true, false, true, false, rng);
    CheckQuantize("rowcol rht sr", square, true, true, false, true, true, rng);
    CheckQuantize("2d", square, true, true, true, false, false, rng);
    const Nvfp4View nested = View(type, 2, {3, 64, 5, 48}, 1);
    CheckQuantize("nested col", nested, false, true, false, false, false, rng);
    CheckQuantize("nested sr", nested, true, true, false, false, true, rng);
    const Nvfp4View odd = View(type, 1, {333, 999}, 0);
    CheckQuantize("odd", odd, true, true, false, false, false, rng);
    CheckAmax("square", square, true, rng);
    CheckAmax("nested", nested, true, rng);
    CheckAmax("rows", rows, false, rng);
  }
}

}  // namespace

int main() {
  TestAll();
  std::printf("nvfp4_parallel_test: %" PRId64 " checks, %d failures\n", checks,
              failures);
  return failures == 0 ? 0 : 1;
}
