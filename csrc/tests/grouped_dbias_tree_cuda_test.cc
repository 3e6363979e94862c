// Host test of the grouped dbias tree cut (grouped/dbias_tree_cuda.cuh)
// against the canonical TreeSum (common/tree_sum.h). Not part of the library;
// build and run by hand from the repository root:
//
//   g++ -std=c++17 -O2 -ffp-contract=off -Wall -Wextra -I csrc
//       csrc/tests/grouped_dbias_tree_cuda_test.cc -o /tmp/dbias_tree_test
//   /tmp/dbias_tree_test
//
// For every group size n in [0, 4200], sizes around powers of two up to 2^20
// and random sizes up to 2^22, and every cluster size 1, 2, 4, 8, it adds the
// rows exactly as DbiasTreeKernel does (warp nodes, chunks of 16 slots added
// as a perfect tree with -0.0 in the empty slots, the binary counter over a
// warp's chunks, the perfect trees over the warps and the cluster ranks) and
// checks, bit for bit, that the result is TreeSum over the rows. Row values
// are random floats of mixed signs and magnitudes (so that any other order
// of adds would differ), all +0, all -0, or +-0 mixes. It also checks that
// the slots visit every row once, in increasing order, that no chunk has more
// than 16 rows and that no binary counter is deeper than MaxWarpChunkLevels.
// Exits non-zero on the first failures.

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/tree_sum.h"
#include "grouped/dbias_tree_cuda.cuh"

namespace {

namespace gdt = eqx_quant::grouped_dbias_tree;

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

int failures = 0;

void Fail(const char* what, int64_t n, int cluster_levels) {
  if (failures++ < 20) {
    std::printf("FAIL %s: n=%" PRId64 " cluster_levels=%d\n", what, n,
                cluster_levels);
  }
}

// A perfect tree over v[0..size) (size a power of two), pairwise.
float PerfectSum(std::vector<float> v) {
  for (size_t width = v.size(); width > 1; width /= 2) {
    for (size_t i = 0; i < width / 2; ++i) v[i] = v[2 * i] + v[2 * i + 1];
  }
  return v[0];
}

// The kernel's sum of rows x[0..n) with 2^cluster_levels CTAs of 8 warps.
float KernelOrderSum(const std::vector<float>& x, int cluster_levels,
                     int max_levels) {
  const int64_t n = static_cast<int64_t>(x.size());
  const int top = cluster_levels + gdt::kWarpLevels;
  const int s = gdt::WarpChunkLevels(n, top);
  if (s > max_levels) Fail("warp levels above the bound", n, cluster_levels);
  int64_t next_row = 0;  // rows must be visited in order
  std::vector<float> rank_sums;
  for (uint32_t rank = 0; rank < (1u << cluster_levels); ++rank) {
    std::vector<float> warp_sums;
    for (uint32_t warp = 0; warp < (1u << gdt::kWarpLevels); ++warp) {
      int64_t begin;
      int64_t rows;
      gdt::DescendNode(n, (rank << gdt::kWarpLevels) | warp, top, &begin,
                       &rows);
      if (begin != next_row && rows > 0) Fail("warp begin", n, cluster_levels);
      // Binary counter over the warp's chunks.
      std::vector<float> stack(s + 1);
      float result = -0.0f;
      int64_t row = begin;
      int64_t chunk_total = 0;
      for (uint32_t q = 0; q < (1u << s); ++q) {
        const int m = gdt::ChunkRows(rows, s, q);
        if (m > gdt::kChunkSlots) Fail("chunk too big", n, cluster_levels);
        chunk_total += m;
        std::vector<float> slots(gdt::kChunkSlots);
        int used = 0;
        for (int j = 0; j < gdt::kChunkSlots; ++j) {
          if (gdt::SlotKey(j) < m) {
            slots[j] = x[row + used];
            ++used;
          } else {
            slots[j] = -0.0f;
          }
        }
        if (used != m) Fail("slot count", n, cluster_levels);
        row += m;
        float v = PerfectSum(slots);
        int level = 0;
        for (uint32_t t = q; (t & 1u) != 0; t >>= 1) v = stack[level++] + v;
        if (level < s) {
          stack[level] = v;
        } else {
          result = v;
        }
      }
      if (chunk_total != rows) Fail("chunk rows", n, cluster_levels);
      next_row = begin + rows;
      warp_sums.push_back(result);
    }
    rank_sums.push_back(PerfectSum(warp_sums));
  }
  if (next_row != n) Fail("rows covered", n, cluster_levels);
  // The kernel adds the rank sums as a perfect tree over 8, -0.0 padded.
  rank_sums.resize(8, -0.0f);
  return PerfectSum(rank_sums);
}

float CanonicalSum(const std::vector<float>& x) {
  auto leaf = [&](int64_t i, float* out, float*) { *out = x[i]; };
  float dst = 0.0f;
  std::vector<float> scratch(eqx_quant::TreeSumDepth(x.size()) + 1);
  eqx_quant::TreeSum(0, static_cast<int64_t>(x.size()), 1, leaf, &dst,
                     scratch.data());
  return dst;
}

void Check(int64_t n, std::mt19937_64& rng, int kind) {
  std::vector<float> x(n);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-30, 30);
  for (int64_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0:  // mixed magnitudes: the order of adds shows in the bits
        x[i] = std::ldexp(mantissa(rng), exponent(rng)) *
               ((rng() & 1) ? 1.0f : -1.0f);
        break;
      case 1:
        x[i] = -0.0f;
        break;
      case 2:
        x[i] = 0.0f;
        break;
      default:
        x[i] = (rng() & 1) ? 0.0f : -0.0f;
        break;
    }
  }
  const float want = n == 0 ? 0.0f : CanonicalSum(x);
  for (int c = 0; c <= 3; ++c) {
    // The kernel sizes its shared stack for the example's rows; any group
    // has at most that many.
    const int max_levels =
        gdt::MaxWarpChunkLevels(n + (rng() % 3), c + gdt::kWarpLevels);
    const float got = n == 0 ? 0.0f : KernelOrderSum(x, c, max_levels);
    if (Bits(got) != Bits(want)) {
      Fail("sum bits", n, c);
      if (failures <= 20) {
        std::printf("  kind %d: got %08x want %08x\n", kind, Bits(got),
                    Bits(want));
      }
    }
  }
}

}  // namespace

int main() {
  std::mt19937_64 rng(12345);
  int64_t checks = 0;
  std::vector<int64_t> sizes;
  for (int64_t n = 0; n <= 4200; ++n) sizes.push_back(n);
  for (int b = 12; b <= 20; ++b) {
    for (int64_t d = -3; d <= 3; ++d) sizes.push_back((int64_t{1} << b) + d);
  }
  std::uniform_int_distribution<int64_t> big(4200, int64_t{1} << 22);
  for (int i = 0; i < 12; ++i) sizes.push_back(big(rng));
  for (int64_t n : sizes) {
    for (int kind = 0; kind < 4; ++kind) {
      if (kind > 0 && n > 5000 && kind != 3) continue;
      Check(n, rng, kind);
      checks += 4;
    }
  }
  // ReverseBits and SlotKey agree.
  for (int j = 0; j < gdt::kChunkSlots; ++j) {
    if (static_cast<int>(gdt::ReverseBits(j, gdt::kChunkLevels)) !=
        gdt::SlotKey(j)) {
      Fail("SlotKey", j, 0);
    }
  }
  std::printf("%" PRId64 " checks, %d failures\n", checks, failures);
  return failures != 0;
}
