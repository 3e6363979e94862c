// The CPU kernel of eqx_quant_nvfp4_amax (nvfp4/quantize_cpu.h).

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/fp8_format.h"
#include "common/nvfp4_problem.h"
#include "common/parallel_for.h"
#include "common/rht.h"
#include "nvfp4/loops_cpu.h"
#include "nvfp4/panel_cpu.h"
#include "nvfp4/quantize_cpu.h"

namespace eqx_quant::cpu {
namespace {

using nvfp4_loops::kB;
using nvfp4_panel::CeilDiv;
using nvfp4_panel::Chunk;
using nvfp4_panel::ChunkPlan;
using nvfp4_panel::Dispatch;
using nvfp4_panel::ItemPlan;
using nvfp4_panel::LoadPanel;
using nvfp4_panel::Scratch;
using nvfp4_panel::ThreadScratch;
using nvfp4_panel::kChunk;
using nvfp4_panel::kMinTaskElements;

// The max of the pieces' keys (exact in any order).
uint32_t MaxKey(const std::vector<uint32_t>& keys) {
  uint32_t key = 0;
  for (uint32_t k : keys) key = std::max(key, k);
  return key;
}

template <typename Input, typename Loops>
void AmaxAll(const Nvfp4AmaxProblem& pr, const Nvfp4AmaxBuffers& buf,
             const ParallelFor& parallel) {
  const Nvfp4View& v = pr.view;
  const int64_t elements = v.a * v.k * v.c * v.l;
  const int64_t w_count = v.c * v.l;
  const auto* x = static_cast<const typename Input::Storage*>(buf.x);
  const RhtMatrix rht = MakeRhtMatrix(pr.rht_sign_mask);
  const ChunkPlan chunks(v.c, v.l);
  // RHT groups: every item a full panel of 16 rows (K % 16 == 0).
  const ItemPlan items(v.a, v.k, chunks);
  const int64_t threads = parallel.threads();
  for (int64_t p = 0; p < v.batch; ++p) {
    const typename Input::Storage* xp = x + p * elements;
    const RangeSplit flat = SplitRange(elements, threads, kMinTaskElements, 64);
    std::vector<uint32_t> keys(static_cast<size_t>(flat.count), 0u);
    parallel(flat.count, [&](int64_t piece) {
      const int64_t begin = flat.begin(piece);
      keys[piece] = Loops::template Amax<Input>(
          xp + begin, flat.end(piece, elements) - begin, 0u);
    });
    buf.amax[p] = BitsToFloat(MaxKey(keys));
    if (!pr.with_rht) continue;
    const int64_t item_elements = kB * kChunk;
    const RangeSplit split = SplitRange(
        items.count, threads, CeilDiv(kMinTaskElements, item_elements), 1);
    keys.assign(static_cast<size_t>(split.count), 0u);
    parallel(split.count, [&](int64_t piece) {
      Scratch& s = ThreadScratch();
      uint32_t rht_key = 0;
      for (int64_t t = split.begin(piece); t < split.end(piece, items.count);
           ++t) {
        const Chunk ch = chunks.Get(items.chunk(t));
        const typename Input::Storage* panel =
            xp + (items.a(t) * v.k + items.k0(t)) * w_count;
        // Padding positions are zero, and RHT(0) = 0.
        LoadPanel<Input, Loops>(panel, w_count, v.l, kB, ch, s);
        Loops::Rht(&s.x[0][0], kChunk, ch.width(), rht, &s.rht[0][0]);
        std::fill(s.col_key, s.col_key + ch.width(), 0u);
        for (int i = 0; i < kB; ++i) {
          Loops::MaxKeys(s.rht[i], ch.width(), s.col_key);
        }
        for (int64_t j = 0; j < ch.width(); ++j) {
          rht_key = std::max(rht_key, s.col_key[j]);
        }
      }
      keys[piece] = rht_key;
    });
    buf.rht_amax[p] = BitsToFloat(MaxKey(keys));
  }
}

template <typename Input, typename Loops>
struct AmaxFn {
  static void Run(const Nvfp4AmaxProblem& p, const Nvfp4AmaxBuffers& b,
                  const ParallelFor& parallel) {
    AmaxAll<Input, Loops>(p, b, parallel);
  }
};

}  // namespace

void Nvfp4Amax(const Nvfp4AmaxProblem& problem, const Nvfp4AmaxBuffers& buffers,
               const ParallelFor& parallel) {
  Dispatch<AmaxFn>(problem, buffers, parallel);
}

}  // namespace eqx_quant::cpu
