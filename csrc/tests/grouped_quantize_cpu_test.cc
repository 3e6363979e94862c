// Host unit test of the grouped CPU kernels (grouped/quantize_cpu.h)
// against the dense CPU kernels run on each group separately (the layout
// arithmetic alone: tests/grouped_layout_test.cc). Not part of the library;
// tests/kernels/test_host_cpp.py builds and runs it, or by hand from the
// repository root (the sanitizers catch any read or write out of bounds):
//
//   g++ -std=c++17 -O1 -g -ffp-contract=off -Wall -Wextra
//       -fsanitize=address,undefined -I csrc
//       csrc/tests/grouped_quantize_cpu_test.cc
//       csrc/grouped/quantize_cpu.cc csrc/fp8/quantize_cpu.cc
//       csrc/mxfp8/quantize_cpu.cc csrc/nvfp4/amax_cpu.cc csrc/nvfp4/quantize_cpu.cc
//       -o /tmp/grouped_test
//   /tmp/grouped_test
//
// It checks the grouped kernels on random shapes, group sizes (empty groups,
// sizes not multiples of the blocks, sums below, at and above R) and batches,
// with outputs pre-filled with garbage and guarded by canaries: every byte
// equals the dense kernel's output of the group placed as docs/grouped.md
// says (swizzled scale regions, zero padding, zero bytes for rows in no
// group), and no byte outside the outputs is touched.

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/fp8_quantize_problem.h"
#include "common/grouped_layout.h"
#include "common/grouped_problem.h"
#include "common/mxfp8_problem.h"
#include "common/nvfp4_problem.h"
#include "common/tree_sum.h"
#include "fp8/quantize_cpu.h"
#include "grouped/quantize_cpu.h"
#include "mxfp8/quantize_cpu.h"
#include "nvfp4/quantize_cpu.h"
#include "tests/host_test_expect.h"

namespace {

namespace g = eqx_quant::grouped;
using eqx_quant::Fp8Format;
using eqx_quant::InputType;

using eqx_quant::host_test::checks;
using eqx_quant::host_test::failures;

// ---------------------------------------------------------------------------
// Kernels against the dense kernels per group

constexpr int kGuard = 64;
constexpr uint8_t kCanary = 0xCD;
constexpr uint8_t kGarbage = 0xAB;

// A byte buffer with canaries on both sides, pre-filled with garbage.
struct Guarded {
  std::vector<uint8_t> storage;
  size_t size = 0;
  explicit Guarded(size_t n) : storage(n + 2 * kGuard, kCanary), size(n) {
    std::fill(storage.begin() + kGuard, storage.begin() + kGuard + n, kGarbage);
  }
  uint8_t* data() { return storage.data() + kGuard; }
  float* floats() { return reinterpret_cast<float*>(data()); }
  bool CanariesIntact() const {
    for (int i = 0; i < kGuard; ++i) {
      if (storage[i] != kCanary || storage[kGuard + size + i] != kCanary) {
        return false;
      }
    }
    return true;
  }
};

uint16_t ToBf16Bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return static_cast<uint16_t>(bits >> 16);  // truncation: any bf16 will do
}

// Random f32 values: a wide range of exponents, both signs, some zeros,
// subnormals, infinities and NaNs.
float RandomValue(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> kind(0, 99);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-12, 12);
  const float sign = (rng() & 1) ? -1.0f : 1.0f;
  const int k = kind(rng);
  if (k == 0) return sign * 0.0f;
  if (k == 1) return sign * 1e-40f;
  if (k == 2) return sign * std::numeric_limits<float>::infinity();
  if (k == 3) return std::numeric_limits<float>::quiet_NaN();
  return sign * std::ldexp(mant(rng), expo(rng));
}

struct Case {
  InputType type = InputType::kF32;
  int64_t batch = 1, rows = 0, cols = 0, groups = 1, unit = 1;
  std::vector<int32_t> sizes;  // batch x groups
  std::vector<uint8_t> x;      // batch x rows x cols elements
  int64_t x_bytes() const { return type == InputType::kF32 ? 4 : 2; }
};

Case RandomCase(std::mt19937_64& rng) {
  Case c;
  std::uniform_int_distribution<int> pick(0, 2);
  c.type = static_cast<InputType>(pick(rng));
  c.batch = 1 + static_cast<int64_t>(rng() % 2);
  c.unit = 1 + static_cast<int64_t>(rng() % 3);
  const int64_t units = static_cast<int64_t>(rng() % 90);
  c.rows = units * c.unit;
  const int64_t col_choices[] = {0, 1, 5, 16, 17, 32, 33, 48, 100, 130};
  c.cols = col_choices[rng() % 10];
  c.groups = 1 + static_cast<int64_t>(rng() % 6);
  for (int64_t b = 0; b < c.batch; ++b) {
    const int mode = static_cast<int>(rng() % 4);
    int64_t left = units;
    for (int64_t i = 0; i < c.groups; ++i) {
      int32_t size;
      if (mode == 0) {  // all in the last group
        size = i + 1 == c.groups ? static_cast<int32_t>(units) : 0;
      } else if (mode == 1) {  // random, may overshoot R or be negative
        size = static_cast<int32_t>(rng() % 50) - 3;
      } else {  // a partition of (mode 2) or below (mode 3) R
        const int64_t take =
            i + 1 == c.groups && mode == 2
                ? left
                : static_cast<int64_t>(rng() % (left + 1));
        size = static_cast<int32_t>(take);
        left -= take;
      }
      c.sizes.push_back(size);
    }
  }
  const int64_t count = c.batch * c.rows * c.cols;
  c.x.resize(static_cast<size_t>(count * c.x_bytes()));
  for (int64_t i = 0; i < count; ++i) {
    const float v = RandomValue(rng);
    if (c.type == InputType::kF32) {
      std::memcpy(c.x.data() + 4 * i, &v, 4);
    } else {
      // bf16 bits; for f16 the same bits are some f16 (NaN/inf included).
      const uint16_t h = ToBf16Bits(v);
      std::memcpy(c.x.data() + 2 * i, &h, 2);
    }
  }
  return c;
}

eqx_quant::GroupedView ViewOf(const Case& c) {
  eqx_quant::GroupedView v;
  v.input_type = c.type;
  v.batch = c.batch;
  v.rows = c.rows;
  v.cols = c.cols;
  v.groups = c.groups;
  v.rows_per_unit = c.unit;
  return v;
}

std::vector<int64_t> StartsOf(const Case& c, int64_t b) {
  std::vector<int64_t> starts(static_cast<size_t>(c.groups + 1));
  g::GroupStarts(c.sizes.data() + b * c.groups, c.groups, c.unit, c.rows,
                 starts.data());
  return starts;
}

// Expected swizzled scale buffer of one example: T_g of every group, from
// `t_of(g, i, j)`, tiles written with the (a, d, c, b, e) permutation.
template <typename TFn>
std::vector<uint8_t> ExpectedScales(g::ScalePart part, const Case& c,
                                    const std::vector<int64_t>& starts,
                                    int64_t block, int64_t bytes, TFn t_of) {
  std::vector<uint8_t> out(static_cast<size_t>(bytes), 0);
  int64_t offset = 0;
  for (int64_t grp = 0; grp < c.groups; ++grp) {
    const g::ScaleRegion r = g::GroupScaleRegion(
        part, starts[grp + 1] - starts[grp], c.cols, block);
    for (int64_t i = 0; i < r.rows; ++i) {
      for (int64_t j = 0; j < r.cols; ++j) {
        const int64_t a = i / 128, bb = (i % 128) / 32, cc = i % 32;
        const int64_t d = j / 4, e = j % 4;
        const int64_t pos =
            (((a * (r.padded_cols / 4) + d) * 32 + cc) * 4 + bb) * 4 + e;
        out[static_cast<size_t>(offset + pos)] = t_of(grp, i, j);
      }
    }
    offset += r.bytes();
  }
  EXPECT(offset <= bytes, "regions %" PRId64 " past the buffer %" PRId64,
         offset, bytes);
  return out;
}

void CompareBytes(const char* what, const uint8_t* got, const uint8_t* want,
                  int64_t n, const Case& c) {
  for (int64_t i = 0; i < n; ++i) {
    if (got[i] != want[i]) {
      EXPECT(false,
             "%s byte %" PRId64 " = 0x%02x, want 0x%02x (R=%" PRId64
             " N=%" PRId64 " G=%" PRId64 " U=%" PRId64 " type=%d)",
             what, i, got[i], want[i], c.rows, c.cols, c.groups, c.unit,
             static_cast<int>(c.type));
      return;
    }
  }
  ++checks;
}

void TestFp8(const Case& c, bool rowwise, bool colwise) {
  const int64_t e = c.rows * c.cols;
  const int64_t n = c.batch * e;
  const int64_t gs = c.batch * c.groups;
  std::vector<float> scale(static_cast<size_t>(gs));
  for (int64_t i = 0; i < gs; ++i) scale[i] = std::ldexp(1.0f, (i % 7) - 3);
  Guarded row(rowwise ? n : 0), col(colwise ? n : 0);
  Guarded scale_inv(4 * gs), amax(4 * gs);
  eqx_quant::GroupedFp8QuantizeProblem pr;
  pr.view = ViewOf(c);
  pr.format = (c.rows & 1) ? Fp8Format::kE5M2 : Fp8Format::kE4M3Fn;
  pr.rowwise = rowwise;
  pr.colwise = colwise;
  eqx_quant::GroupedFp8QuantizeBuffers buf;
  buf.x = c.x.data();
  buf.scale = scale.data();
  buf.group_sizes = c.sizes.data();
  buf.row = rowwise ? row.data() : nullptr;
  buf.col = colwise ? col.data() : nullptr;
  buf.scale_inv = scale_inv.floats();
  buf.amax = amax.floats();
  eqx_quant::cpu::GroupedFp8Quantize(pr, buf);

  std::vector<uint8_t> want_row(static_cast<size_t>(n), 0);
  std::vector<uint8_t> want_col(static_cast<size_t>(n), 0);
  std::vector<float> want_inv(static_cast<size_t>(gs));
  std::vector<float> want_amax(static_cast<size_t>(gs));
  for (int64_t b = 0; b < c.batch; ++b) {
    const std::vector<int64_t> starts = StartsOf(c, b);
    for (int64_t grp = 0; grp < c.groups; ++grp) {
      const int64_t rows = starts[grp + 1] - starts[grp];
      const int64_t first = b * e + starts[grp] * c.cols;
      std::vector<uint8_t> r(static_cast<size_t>(rows * c.cols) + 1);
      std::vector<uint8_t> t(static_cast<size_t>(rows * c.cols) + 1);
      eqx_quant::Fp8QuantizeProblem dp;
      dp.input_type = c.type;
      dp.format = pr.format;
      dp.rows = rows;
      dp.cols = c.cols;
      dp.rowwise = true;
      dp.colwise = true;
      eqx_quant::Fp8QuantizeBuffers db;
      db.x = c.x.data() + first * c.x_bytes();
      db.scale = &scale[b * c.groups + grp];
      db.row = r.data();
      db.col = t.data();
      db.scale_inv = &want_inv[b * c.groups + grp];
      db.amax = &want_amax[b * c.groups + grp];
      eqx_quant::cpu::Fp8Quantize(dp, db);
      std::copy(r.begin(), r.end() - 1, want_row.begin() + first);
      std::copy(t.begin(), t.end() - 1, want_col.begin() + first);
    }
  }
  if (rowwise) CompareBytes("fp8 row", row.data(), want_row.data(), n, c);
  if (colwise) CompareBytes("fp8 col", col.data(), want_col.data(), n, c);
  CompareBytes("fp8 scale_inv", scale_inv.data(),
               reinterpret_cast<const uint8_t*>(want_inv.data()), 4 * gs, c);
  CompareBytes("fp8 amax", amax.data(),
               reinterpret_cast<const uint8_t*>(want_amax.data()), 4 * gs, c);
  EXPECT(row.CanariesIntact() && col.CanariesIntact() &&
             scale_inv.CanariesIntact() && amax.CanariesIntact(),
         "fp8 canaries");
}

void TestMxfp8(const Case& c, bool rowwise, bool colwise) {
  const int64_t e = c.rows * c.cols;
  const int64_t n = c.batch * e;
  const int64_t lr = g::ScaleBufferBytes(g::ScalePart::kRowwise, c.rows,
                                         c.cols, c.groups, 32);
  const int64_t lc = g::ScaleBufferBytes(g::ScalePart::kColwise, c.rows,
                                         c.cols, c.groups, 32);
  Guarded row(rowwise ? n : 0), col(colwise ? n : 0);
  Guarded row_scale(rowwise ? c.batch * lr : 0);
  Guarded col_scale(colwise ? c.batch * lc : 0);
  eqx_quant::GroupedMxfp8QuantizeProblem pr;
  pr.view = ViewOf(c);
  pr.format = (c.cols & 1) ? Fp8Format::kE5M2 : Fp8Format::kE4M3Fn;
  pr.rowwise = rowwise;
  pr.colwise = colwise;
  pr.row_scale_bytes = rowwise ? lr : 0;
  pr.col_scale_bytes = colwise ? lc : 0;
  eqx_quant::GroupedMxfp8QuantizeBuffers buf;
  buf.x = c.x.data();
  buf.group_sizes = c.sizes.data();
  buf.row = rowwise ? row.data() : nullptr;
  buf.row_scale = rowwise ? row_scale.data() : nullptr;
  buf.col = colwise ? col.data() : nullptr;
  buf.col_scale = colwise ? col_scale.data() : nullptr;
  eqx_quant::cpu::GroupedMxfp8Quantize(pr, buf);

  const int64_t row_blocks = eqx_quant::Mxfp8Blocks(c.cols);
  for (int64_t b = 0; b < c.batch; ++b) {
    const std::vector<int64_t> starts = StartsOf(c, b);
    std::vector<uint8_t> want_row(static_cast<size_t>(e), 0);
    std::vector<uint8_t> want_col(static_cast<size_t>(e), 0);
    std::vector<std::vector<uint8_t>> rs(c.groups), cs(c.groups);
    for (int64_t grp = 0; grp < c.groups; ++grp) {
      const int64_t rows = starts[grp + 1] - starts[grp];
      const int64_t first = starts[grp] * c.cols;
      rs[grp].resize(static_cast<size_t>(rows * row_blocks) + 1);
      cs[grp].resize(
          static_cast<size_t>(eqx_quant::Mxfp8Blocks(rows) * c.cols) + 1);
      eqx_quant::Mxfp8QuantizeProblem dp;
      dp.input_type = c.type;
      dp.format = pr.format;
      dp.blocked = rows;
      dp.last = c.cols;
      dp.rowwise = true;
      dp.colwise = true;
      eqx_quant::Mxfp8QuantizeBuffers db;
      db.x = c.x.data() + (b * e + first) * c.x_bytes();
      db.row = want_row.data() + first;
      db.row_scale = rs[grp].data();
      db.col = want_col.data() + first;
      db.col_scale = cs[grp].data();
      eqx_quant::cpu::Mxfp8Quantize(dp, db);
    }
    if (rowwise) {
      CompareBytes("mxfp8 row", row.data() + b * e, want_row.data(), e, c);
      const auto want = ExpectedScales(
          g::ScalePart::kRowwise, c, starts, 32, lr,
          [&](int64_t grp, int64_t i, int64_t j) {
            return rs[grp][static_cast<size_t>(i * row_blocks + j)];
          });
      CompareBytes("mxfp8 row_scale", row_scale.data() + b * lr, want.data(),
                   lr, c);
    }
    if (colwise) {
      CompareBytes("mxfp8 col", col.data() + b * e, want_col.data(), e, c);
      const auto want = ExpectedScales(
          g::ScalePart::kColwise, c, starts, 32, lc,
          [&](int64_t grp, int64_t i, int64_t j) {  // T[n][blk] = s[blk][n]
            return cs[grp][static_cast<size_t>(j * c.cols + i)];
          });
      CompareBytes("mxfp8 col_scale", col_scale.data() + b * lc, want.data(),
                   lc, c);
    }
  }
  EXPECT(row.CanariesIntact() && col.CanariesIntact() &&
             row_scale.CanariesIntact() && col_scale.CanariesIntact(),
         "mxfp8 canaries");
}

// Element i of a packed F4E2M1FN buffer.
uint8_t Nibble(const uint8_t* packed, int64_t i) {
  return static_cast<uint8_t>((packed[i / 2] >> (4 * (i % 2))) & 0xFu);
}

// Elements first .. first + count - 1 of a packed buffer, one per byte.
std::vector<uint8_t> Nibbles(const uint8_t* packed, int64_t first,
                             int64_t count) {
  std::vector<uint8_t> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    out[static_cast<size_t>(i)] = Nibble(packed, first + i);
  }
  return out;
}

void TestNvfp4(const Case& c, bool rowwise, bool colwise, bool use_2d,
               bool sr) {
  const int64_t e = c.rows * c.cols;
  const int64_t n = c.batch * e;
  const int64_t gs = c.batch * c.groups;
  const int64_t lr = g::ScaleBufferBytes(g::ScalePart::kRowwise, c.rows,
                                         c.cols, c.groups, 16);
  const int64_t lc = g::ScaleBufferBytes(g::ScalePart::kColwise, c.rows,
                                         c.cols, c.groups, 16);
  std::vector<float> amax(static_cast<size_t>(gs));
  std::vector<uint32_t> keys(static_cast<size_t>(2 * gs));
  for (int64_t i = 0; i < gs; ++i) {
    amax[i] = (i % 3 == 0) ? 0.0f : std::ldexp(1.5f, static_cast<int>(i % 9));
    keys[2 * i] = static_cast<uint32_t>(0x9E3779B9u * (i + 1));
    keys[2 * i + 1] = static_cast<uint32_t>(0x85EBCA6Bu * (i + 7));
  }
  // Packed E2M1 codes: element i is nibble i % 2 (0 = low) of byte i / 2.
  Guarded row(rowwise ? (n + 1) / 2 : 0), col(colwise ? (n + 1) / 2 : 0);
  Guarded row_scale(rowwise ? c.batch * lr : 0);
  Guarded col_scale(colwise ? c.batch * lc : 0);
  eqx_quant::GroupedNvfp4QuantizeProblem pr;
  pr.view = ViewOf(c);
  pr.rowwise = rowwise;
  pr.colwise = colwise;
  pr.use_2d = use_2d;
  pr.stochastic_rounding = sr;
  pr.row_scale_bytes = rowwise ? lr : 0;
  pr.col_scale_bytes = colwise ? lc : 0;
  eqx_quant::GroupedNvfp4QuantizeBuffers buf;
  buf.x = c.x.data();
  buf.amax = amax.data();
  buf.keys = keys.data();
  buf.group_sizes = c.sizes.data();
  buf.row = rowwise ? row.data() : nullptr;
  buf.row_scale = rowwise ? row_scale.data() : nullptr;
  buf.col = colwise ? col.data() : nullptr;
  buf.col_scale = colwise ? col_scale.data() : nullptr;
  eqx_quant::cpu::GroupedNvfp4Quantize(pr, buf);

  const int64_t row_blocks = g::CeilDiv(c.cols, 16);
  const int32_t offset[2] = {0, 0};
  for (int64_t b = 0; b < c.batch; ++b) {
    const std::vector<int64_t> starts = StartsOf(c, b);
    // One code per element; rows past the last group stay 0.
    std::vector<uint8_t> want_row(static_cast<size_t>(e), 0);
    std::vector<uint8_t> want_col(static_cast<size_t>(e), 0);
    std::vector<std::vector<uint8_t>> rs(c.groups), cs(c.groups);
    for (int64_t grp = 0; grp < c.groups; ++grp) {
      const int64_t rows = starts[grp + 1] - starts[grp];
      const int64_t first = starts[grp] * c.cols;
      const int64_t slot = b * c.groups + grp;
      rs[grp].resize(static_cast<size_t>(rows * row_blocks) + 1);
      cs[grp].resize(static_cast<size_t>(c.cols * g::CeilDiv(rows, 16)) + 1);
      // The dense op on the group's 2-D (rows, N), blocked along the rows.
      eqx_quant::Nvfp4QuantizeProblem dp;
      dp.view.input_type = c.type;
      dp.view.k = rows;
      dp.view.l = c.cols;
      dp.view.shape = {rows, c.cols};
      dp.view.k_axis = 0;
      dp.rowwise = true;
      dp.colwise = true;
      dp.use_2d = use_2d;
      dp.stochastic_rounding = sr;
      dp.global_shape = {rows, c.cols};
      eqx_quant::Nvfp4QuantizeBuffers db;
      db.x = c.x.data() + (b * e + first) * c.x_bytes();
      db.amax = &amax[slot];
      db.col_amax = &amax[slot];
      db.key = &keys[2 * slot];
      db.offset = offset;
      std::vector<uint8_t> group_row(static_cast<size_t>(rows * c.cols / 2 + 1));
      std::vector<uint8_t> group_col(group_row.size());
      db.row = group_row.data();
      db.row_scale = rs[grp].data();
      db.col = group_col.data();
      db.col_scale = cs[grp].data();
      eqx_quant::cpu::Nvfp4Quantize(dp, db);
      for (int64_t i = 0; i < rows * c.cols; ++i) {
        want_row[static_cast<size_t>(first + i)] = Nibble(group_row.data(), i);
        want_col[static_cast<size_t>(first + i)] = Nibble(group_col.data(), i);
      }
    }
    if (rowwise) {
      const std::vector<uint8_t> got = Nibbles(row.data(), b * e, e);
      CompareBytes("nvfp4 row", got.data(), want_row.data(), e, c);
      const auto want = ExpectedScales(
          g::ScalePart::kRowwise, c, starts, 16, lr,
          [&](int64_t grp, int64_t i, int64_t j) {
            return rs[grp][static_cast<size_t>(i * row_blocks + j)];
          });
      CompareBytes("nvfp4 row_scale", row_scale.data() + b * lr, want.data(),
                   lr, c);
    }
    if (colwise) {
      const std::vector<uint8_t> got = Nibbles(col.data(), b * e, e);
      CompareBytes("nvfp4 col", got.data(), want_col.data(), e, c);
      const auto want = ExpectedScales(
          g::ScalePart::kColwise, c, starts, 16, lc,
          [&](int64_t grp, int64_t i, int64_t j) {
            const int64_t blocks = g::CeilDiv(starts[grp + 1] - starts[grp], 16);
            return cs[grp][static_cast<size_t>(i * blocks + j)];
          });
      CompareBytes("nvfp4 col_scale", col_scale.data() + b * lc, want.data(),
                   lc, c);
    }
  }
  EXPECT(row.CanariesIntact() && col.CanariesIntact() &&
             row_scale.CanariesIntact() && col_scale.CanariesIntact(),
         "nvfp4 canaries");
}

// dbias: against the dense FP8 kernel's fused dbias of each group.
void TestDbias(const Case& c) {
  const int64_t e = c.rows * c.cols;
  const int64_t out = c.batch * c.groups * c.cols;
  Guarded dbias(4 * out);
  eqx_quant::GroupedDbiasProblem pr;
  pr.view = ViewOf(c);
  eqx_quant::GroupedDbiasBuffers buf;
  buf.x = c.x.data();
  buf.group_sizes = c.sizes.data();
  buf.dbias = dbias.floats();
  eqx_quant::cpu::GroupedDbias(pr, buf);

  std::vector<float> want(static_cast<size_t>(out), 0.0f);
  for (int64_t b = 0; b < c.batch; ++b) {
    const std::vector<int64_t> starts = StartsOf(c, b);
    for (int64_t grp = 0; grp < c.groups; ++grp) {
      const int64_t rows = starts[grp + 1] - starts[grp];
      std::vector<uint8_t> r(static_cast<size_t>(rows * c.cols) + 1);
      float scale = 1.0f, inv, amax;
      eqx_quant::Fp8QuantizeProblem dp;
      dp.input_type = c.type;
      dp.rows = rows;
      dp.cols = c.cols;
      dp.rowwise = true;
      dp.with_dbias = true;
      dp.dbias_reduced_dims = {rows};
      eqx_quant::Fp8QuantizeBuffers db;
      db.x = c.x.data() + (b * e + starts[grp] * c.cols) * c.x_bytes();
      db.scale = &scale;
      db.row = r.data();
      db.scale_inv = &inv;
      db.amax = &amax;
      db.dbias = want.data() + (b * c.groups + grp) * c.cols;
      eqx_quant::cpu::Fp8Quantize(dp, db);
      if (rows == 0) {  // +0.0f for an empty group
        for (int64_t j = 0; j < c.cols; ++j) {
          uint32_t bits;
          std::memcpy(&bits, &want[(b * c.groups + grp) * c.cols + j], 4);
          EXPECT(bits == 0, "dense dbias of an empty group is not +0");
        }
      }
    }
  }
  CompareBytes("dbias", dbias.data(),
               reinterpret_cast<const uint8_t*>(want.data()), 4 * out, c);
  EXPECT(dbias.CanariesIntact(), "dbias canaries");
}

void TestKernels() {
  std::mt19937_64 rng(20240611);
  for (int iter = 0; iter < 300; ++iter) {
    const Case c = RandomCase(rng);
    const int parts = 1 + iter % 3;  // rowwise, colwise, both
    const bool rw = parts & 1, cw = parts & 2;
    TestFp8(c, rw, cw);
    TestMxfp8(c, rw, cw);
    TestNvfp4(c, rw, cw, (iter / 3) % 2 == 1, (iter / 6) % 2 == 1);
    TestDbias(c);
  }
}

}  // namespace

int main() {
  TestKernels();
  std::printf("%" PRId64 " checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
