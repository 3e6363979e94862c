// The panel walk shared by the NVFP4 CPU kernels (nvfp4/quantize_cpu.cc,
// nvfp4/amax_cpu.cc): how an example is cut into (16-row panel, column chunk)
// work items, the per-thread scratch of one item, its f32 load, and the pick
// of the loop set this CPU supports. Internal to those two files.

#ifndef EQX_QUANT_CSRC_NVFP4_PANEL_CPU_H_
#define EQX_QUANT_CSRC_NVFP4_PANEL_CPU_H_

#include <algorithm>
#include <cstdint>
#include <memory>

#include "common/nvfp4_problem.h"
#include "common/parallel_for.h"
#include "nvfp4/loops_cpu.h"

namespace eqx_quant::cpu::nvfp4_panel {

using nvfp4_loops::Bf16Input;
using nvfp4_loops::F16Input;
using nvfp4_loops::F32Input;
using nvfp4_loops::kB;

// An example (A, K, C, L) is walked in panels: up to 16 consecutive k of one
// a, i.e. up to 16 rows of W = C * L contiguous elements (one band of 2D
// tiles, one colwise block / RHT group per column). A panel is processed in
// chunks of whole (c, 16-aligned l range) segments, converted to f32 into
// Scratch with each segment zero-padded to a multiple of 16 positions, so
// that every rowwise block and tile starts at a multiple of 16.
constexpr int64_t kChunk = 256;  // positions per chunk (16 rows fit in L1)
constexpr int64_t kChunkBlocks = kChunk / kB;

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t RoundUp16(int64_t a) { return CeilDiv(a, kB) * kB; }

// l in [l0, l0 + nl) of each c in [c0, c0 + nc); segment cc occupies the
// positions [cc * nlp, (cc + 1) * nlp), nlp = RoundUp16(nl). Either nc == 1
// or (l0 == 0 and nl == L); l0 % 16 == 0.
struct Chunk {
  int64_t c0, nc, l0, nl, nlp;
  int64_t width() const { return nc * nlp; }
  int64_t blocks() const { return width() / kB; }
};

// The chunks of the C * L columns of a panel, in increasing order: chunk i
// is Get(i), i < count().
class ChunkPlan {
 public:
  ChunkPlan(int64_t c_count, int64_t l_count)
      : c_count_(c_count), l_count_(l_count) {
    if (c_count_ == 0 || l_count_ == 0) return;
    split_l_ = RoundUp16(l_count_) >= kChunk;  // each c split into l ranges
    if (split_l_) {
      per_ = CeilDiv(l_count_, kChunk);  // chunks per c
      count_ = c_count_ * per_;
    } else {
      per_ = kChunk / RoundUp16(l_count_);  // whole c per chunk
      count_ = CeilDiv(c_count_, per_);
    }
  }

  int64_t count() const { return count_; }

  Chunk Get(int64_t i) const {
    if (split_l_) {
      const int64_t l0 = (i % per_) * kChunk;
      const int64_t nl = std::min(kChunk, l_count_ - l0);
      return Chunk{i / per_, 1, l0, nl, RoundUp16(nl)};
    }
    const int64_t c0 = i * per_;
    return Chunk{c0, std::min(per_, c_count_ - c0), 0, l_count_,
                 RoundUp16(l_count_)};
  }

 private:
  int64_t c_count_;
  int64_t l_count_;
  bool split_l_ = false;
  int64_t per_ = 1;
  int64_t count_ = 0;
};

// Working set of one panel chunk (one per thread, ThreadScratch).
struct Scratch {
  float x[kB][kChunk];          // f32 inputs, row i = k0 + i, padded segments
  float rht[kB][kChunk];        // RHT outputs (bf16 values) along K
  uint8_t codes[kB][kChunk];    // colwise codes before the transposed write
  uint8_t row_codes[kChunk];    // rowwise codes of one row
  uint32_t col_key[kChunk];     // per position: max over the panel's rows
  uint8_t col_sdb[kChunk];      // colwise scale byte per position
  float col_enc[kChunk];        // colwise multiplier per position
  float row_enc[kChunk];        // rowwise multiplier per position
  uint64_t seg_index[kChunkBlocks];  // SR: index of (c, l0) of each segment
  uint8_t sr_bytes[kChunk + 16];     // SR: bytes of one segment's octets
  uint8_t col_sr_bytes[kB][kChunk];  // SR: colwise bytes, per panel row
  uint8_t run_bytes[3 * 8];          // SR: the octets of one colwise block
  uint32_t blk_key[kB * kChunkBlocks];  // rowwise block amax keys, per row
  uint8_t blk_sdb[kB * kChunkBlocks];
  float blk_enc[kB * kChunkBlocks];
  uint32_t tile_key[kChunkBlocks];  // 2D tile amax keys
  uint8_t tile_sdb[kChunkBlocks];   // 2D rowwise scales
  float tile_enc[kChunkBlocks];
};

// The calling thread's Scratch, kept between calls.
inline Scratch& ThreadScratch() {
  thread_local const std::unique_ptr<Scratch> scratch =
      std::make_unique<Scratch>();
  return *scratch;
}

// Work below this many elements per task is not split.
constexpr int64_t kMinTaskElements = int64_t{1} << 15;

// The work items of one example: item t is chunk t % chunks of the panel
// t / chunks, panel p being the rows [k0, k0 + 16) of a = p / panels_per_a,
// k0 = 16 * (p % panels_per_a).
struct ItemPlan {
  int64_t chunks = 0;
  int64_t panels_per_a = 0;
  int64_t count = 0;

  ItemPlan(int64_t a, int64_t k, const ChunkPlan& plan)
      : chunks(plan.count()),
        panels_per_a(CeilDiv(k, kB)),
        count(a * panels_per_a * plan.count()) {}

  int64_t a(int64_t t) const { return t / chunks / panels_per_a; }
  int64_t k0(int64_t t) const { return (t / chunks) % panels_per_a * kB; }
  int64_t chunk(int64_t t) const { return t % chunks; }
};

// Scratch.x[i] = the chunk's positions of panel row i (for i < rows), each
// segment zero-padded to its 16-aligned length. The panel's rows are
// w_count elements apart.
template <typename Input, typename Loops>
void LoadPanel(const typename Input::Storage* panel, int64_t w_count,
               int64_t l_count, int rows, const Chunk& ch, Scratch& s) {
  for (int i = 0; i < rows; ++i) {
    for (int64_t cc = 0; cc < ch.nc; ++cc) {
      float* dst = s.x[i] + cc * ch.nlp;
      Loops::template Load<Input>(
          panel + i * w_count + (ch.c0 + cc) * l_count + ch.l0, ch.nl, dst);
      std::fill(dst + ch.nl, dst + ch.nlp, 0.0f);
    }
  }
}

// Runs Fn<Input, Loops>(problem, buffers, parallel) with the fastest loop
// set this CPU supports.
template <template <typename, typename> class Fn, typename Problem,
          typename Buffers>
void Dispatch(const Problem& problem, const Buffers& buffers,
              const ParallelFor& parallel) {
  const InputType type = problem.view.input_type;
#if defined(EQX_QUANT_NVFP4_AVX2_LOOPS)
  if (__builtin_cpu_supports("avx2")) {
    using L = nvfp4_loops::Avx2Loops;
    if (type == InputType::kF32)
      return Fn<F32Input, L>::Run(problem, buffers, parallel);
    if (type == InputType::kF16)
      return Fn<F16Input, L>::Run(problem, buffers, parallel);
    return Fn<Bf16Input, L>::Run(problem, buffers, parallel);
  }
#endif
  using L = nvfp4_loops::GenericLoops;
  if (type == InputType::kF32)
    return Fn<F32Input, L>::Run(problem, buffers, parallel);
  if (type == InputType::kF16)
    return Fn<F16Input, L>::Run(problem, buffers, parallel);
  return Fn<Bf16Input, L>::Run(problem, buffers, parallel);
}

}  // namespace eqx_quant::cpu::nvfp4_panel

#endif  // EQX_QUANT_CSRC_NVFP4_PANEL_CPU_H_
