#include "nvfp4/quantize_cpu.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/fp8_format.h"
#include "common/nvfp4_format.h"
#include "common/nvfp4_problem.h"
#include "common/parallel_for.h"
#include "common/rht.h"
#include "common/threefry.h"
#include "nvfp4/loops_cpu.h"

namespace eqx_quant::cpu {
namespace {

using nvfp4_loops::Bf16Input;
using nvfp4_loops::CodeOut;
using nvfp4_loops::F16Input;
using nvfp4_loops::F32Input;
using nvfp4_loops::kB;
using nvfp4_loops::SrRun;

// An example (A, K, C, L) is walked in panels: up to 16 consecutive k of one
// a, i.e. up to 16 rows of W = C * L contiguous elements (one band of 2D
// tiles, one colwise block / RHT group per column). A panel is processed in
// chunks of whole (c, 16-aligned l range) segments, converted to f32 into
// Scratch with each segment zero-padded to a multiple of 16 positions, so
// that every rowwise block and tile starts at a multiple of 16.
constexpr int64_t kChunk = 256;  // positions per chunk (16 rows fit in L1)
constexpr int64_t kChunkBlocks = kChunk / kB;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t RoundUp16(int64_t a) { return CeilDiv(a, kB) * kB; }

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
Scratch& ThreadScratch() {
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

// The stochastic-rounding indices of an x element s: rowwise ravel(s +
// offset, G), colwise ravel(T(s + offset), T(G)) mod 2^64, T(v) = v[fa:] +
// v[:fa] (the T layout, fa = k_axis + 1) and G the global shape; each a sum
// of one term per dim d of S, term_d = uint32(s_d + offset_d) * the dim's
// stride in G (rowwise) or in T(G) (colwise, `col`). The row index (a, k, c)
// is split into the dims [0, a_end) (a), k_axis (k, if >= 0; its colwise
// stride is 1) and [c_begin, n-1) (c); l is the last dim.
class SrIndex {
 public:
  SrIndex(const std::vector<int64_t>& shape,
          const std::vector<int64_t>& global_shape, const int32_t* offset,
          int a_end, int k_axis, int c_begin)
      : shape_(shape), a_end_(a_end), k_axis_(k_axis), c_begin_(c_begin) {
    const int n = static_cast<int>(shape_.size());
    stride_[0].assign(n, 0);
    stride_[1].assign(n, 0);
    Nvfp4SrStrides(global_shape, k_axis, stride_[0].data(), stride_[1].data());
    offset_.assign(n, 0);
    for (int d = 0; d < n; ++d) offset_[d] = static_cast<uint32_t>(offset[d]);
    l_axis_ = n - 1;
  }

  uint64_t A(int64_t a, bool col = false) const {
    return Multi(0, a_end_, a, col);
  }
  uint64_t K(int64_t k, bool col = false) const {
    return k_axis_ >= 0 ? Term(k_axis_, k, col) : 0;
  }
  uint64_t C(int64_t c, bool col = false) const {
    return Multi(c_begin_, l_axis_, c, col);
  }
  uint64_t L(int64_t l, bool col = false) const {
    return Term(l_axis_, l, col);
  }

 private:
  uint64_t Term(int d, int64_t s, bool col) const {
    return static_cast<uint64_t>(static_cast<uint32_t>(s) + offset_[d]) *
           stride_[col ? 1 : 0][d];
  }
  // Sum of the terms of the row-major multi-index of `linear` over the dims
  // [begin, end).
  uint64_t Multi(int begin, int end, int64_t linear, bool col) const {
    uint64_t sum = 0;
    for (int d = end - 1; d >= begin; --d) {
      sum += Term(d, linear % shape_[d], col);
      linear /= shape_[d];
    }
    return sum;
  }

  std::vector<int64_t> shape_;
  std::vector<uint64_t> stride_[2];  // rowwise, colwise
  std::vector<uint32_t> offset_;
  int a_end_, k_axis_, c_begin_, l_axis_ = 0;
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

// One example being quantized; `Loops` is a loop set of nvfp4/loops_cpu.h.
template <typename Input, typename Loops>
class ExampleQuantizer {
 public:
  using Storage = typename Input::Storage;

  ExampleQuantizer(const Nvfp4QuantizeProblem& pr, int64_t a, int64_t k,
                   int64_t c, int64_t l, const ChunkPlan& chunks,
                   const SrIndex* sr, const RhtMatrix& rht, Scratch& s)
      : pr_(pr), a_(a), k_(k), c_(c), l_(l), chunks_(chunks), sr_(sr),
        rht_(rht), s_(s) {}

  void Start(const Storage* x, CodeOut row, uint8_t* row_scale, CodeOut col,
             uint8_t* col_scale, float amax, float col_amax, uint32_t key0,
             uint32_t key1) {
    x_ = x;
    row_ = row;
    row_scale_ = row_scale;
    col_ = col;
    col_scale_ = col_scale;
    row_t_ = MakeNvfp4TensorScale(amax);
    col_t_ = MakeNvfp4TensorScale(col_amax);
    key0_ = key0;
    key1_ = key1;
  }

  // The items [begin, end) of ItemPlan(a, k, chunks), after Start.
  void Items(const ItemPlan& items, int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t ai = items.a(t);
      const int64_t k0 = items.k0(t);
      const int rows = static_cast<int>(std::min<int64_t>(kB, k_ - k0));
      Panel(ai, k0, rows, chunks_.Get(items.chunk(t)), sr_ ? sr_->A(ai) : 0);
    }
  }

 private:
  void Panel(int64_t ai, int64_t k0, int rows, const Chunk& ch,
             uint64_t a_index) {
    const int64_t w_count = c_ * l_;
    LoadPanel<Input, Loops>(x_ + (ai * k_ + k0) * w_count, w_count, l_, rows,
                            ch, s_);
    if (sr_ != nullptr) {  // position jl of segment cc: see CodesSr
      seg_last_ = static_cast<uint32_t>(sr_->L(ch.l0));
      for (int64_t cc = 0; cc < ch.nc; ++cc) {
        s_.seg_index[cc] = sr_->C(ch.c0 + cc) + seg_last_;
      }
    }
    if (pr_.use_2d) {
      std::fill(s_.col_key, s_.col_key + ch.width(), 0u);
      for (int i = 0; i < rows; ++i) {
        Loops::MaxKeys(s_.x[i], ch.width(), s_.col_key);
      }
      Loops::BlockMax(s_.col_key, ch.blocks(), s_.tile_key);
    }
    if (pr_.rowwise) Rowwise(ai, k0, rows, ch, a_index);
    if (pr_.colwise) Colwise(ai, k0, rows, ch);
  }

  void Rowwise(int64_t ai, int64_t k0, int rows, const Chunk& ch,
               uint64_t a_index) {
    const int64_t width = ch.width();
    const int64_t blocks = ch.blocks();
    const int64_t l_blocks = CeilDiv(l_, kB);
    const int64_t seg_blocks = ch.nlp / kB;
    // Scale bytes and multipliers of all blocks of the panel rows (row i's
    // at i * blocks), or of the tiles, shared by the rows, in 2D.
    const uint8_t* sdb = s_.blk_sdb;
    const float* enc = s_.blk_enc;
    int64_t row_step = blocks;
    if (pr_.use_2d) {
      Loops::Scales(s_.tile_key, blocks, row_t_, s_.tile_sdb, s_.tile_enc);
      sdb = s_.tile_sdb;
      enc = s_.tile_enc;
      row_step = 0;
    } else {
      for (int i = 0; i < rows; ++i) {
        Loops::BlockKeys(s_.x[i], blocks, s_.blk_key + i * blocks);
      }
      Loops::Scales(s_.blk_key, rows * blocks, row_t_, s_.blk_sdb, s_.blk_enc);
    }
    for (int i = 0; i < rows; ++i, sdb += row_step, enc += row_step) {
      const int64_t r = ai * k_ + k0 + i;
      Loops::ExpandFloats(enc, blocks, s_.row_enc);
      if (sr_ == nullptr) {
        Loops::Codes(s_.x[i], s_.row_enc, width, s_.row_codes);
      } else {
        RowCodesSr(s_.x[i], s_.row_enc, ch, a_index + sr_->K(k0 + i),
                   s_.row_codes);
      }
      for (int64_t cc = 0; cc < ch.nc; ++cc) {
        const int64_t c = ch.c0 + cc;
        row_.Run((r * c_ + c) * l_ + ch.l0, s_.row_codes + cc * ch.nlp,
                 ch.nl);
        std::memcpy(row_scale_ + (r * c_ + c) * l_blocks + ch.l0 / kB,
                    sdb + cc * seg_blocks, seg_blocks);
      }
    }
  }

  // out[j] = rowwise SR code of x[j] * enc[j] for the chunk's positions j of a
  // panel row whose (a, k) index terms sum to `row_index`. Position jl of segment
  // cc has the index row_index + seg_index[cc] - seg_last_ + uint32(seg_last_
  // + jl): consecutive unless the last dim's term wraps (an offset near
  // 2^32). Consecutive: the bytes come one octet (one Threefry call) at a
  // time from the octet of the first index, from its byte first % 8 on;
  // else one call per position.
  void RowCodesSr(const float* x, const float* enc, const Chunk& ch,
                  uint64_t row_index, uint8_t* out) {
    const bool wraps = seg_last_ > 0xFFFFFFFFu - (ch.nlp - 1);
    for (int64_t cc = 0; cc < ch.nc; ++cc) {
      const uint64_t first = row_index + s_.seg_index[cc];
      const int64_t at = cc * ch.nlp;
      if (wraps) {
        const uint64_t row_c = first - seg_last_;
        for (int64_t jl = 0; jl < ch.nlp; ++jl) {
          const uint32_t last = seg_last_ + static_cast<uint32_t>(jl);
          s_.sr_bytes[jl] = static_cast<uint8_t>(
              StochasticRoundingByte(key0_, key1_, row_c + last,
                                     kRowwiseStream));
        }
        Loops::CodesSr(x + at, enc + at, ch.nlp, s_.sr_bytes, out + at);
        continue;
      }
      const int64_t skip = static_cast<int64_t>(first & 7u);
      Loops::SrBytes(SrRun{key0_, key1_, first >> 3, kRowwiseStream},
                     (skip + ch.nlp + 7) / 8, s_.sr_bytes);
      Loops::CodesSr(x + at, enc + at, ch.nlp, s_.sr_bytes + skip, out + at);
    }
  }

  // s_.col_sr_bytes[i][j] = the colwise random byte of panel row i (k0 + i)
  // at the chunk's position j. A position's rows are consecutive colwise
  // indices (K is the last dim of the T layout, stride 1), so its block is
  // one run of at most three octets, unless the K term wraps (an offset near
  // 2^32): then one call per row. Padding positions get zeros (their codes
  // are not stored).
  void ColwiseSrBytes(int64_t ai, int64_t k0, int rows, const Chunk& ch) {
    const uint64_t a_index = sr_->A(ai, true);
    const uint32_t k_first = static_cast<uint32_t>(sr_->K(k0, true));
    const bool wraps = k_first > 0xFFFFFFFFu - static_cast<uint32_t>(rows - 1);
    for (int64_t cc = 0; cc < ch.nc; ++cc) {
      const uint64_t c_index = a_index + sr_->C(ch.c0 + cc, true);
      for (int i = 0; i < rows; ++i) {
        std::fill(s_.col_sr_bytes[i] + cc * ch.nlp + ch.nl,
                  s_.col_sr_bytes[i] + (cc + 1) * ch.nlp, uint8_t{0});
      }
      for (int64_t jl = 0; jl < ch.nl; ++jl) {
        const uint64_t base = c_index + sr_->L(ch.l0 + jl, true);
        const int64_t j = cc * ch.nlp + jl;
        if (wraps) {
          for (int i = 0; i < rows; ++i) {
            s_.col_sr_bytes[i][j] = static_cast<uint8_t>(StochasticRoundingByte(
                key0_, key1_, base + static_cast<uint32_t>(k_first + i),
                kColwiseStream));
          }
          continue;
        }
        const uint64_t first = base + k_first;
        const int64_t skip = static_cast<int64_t>(first & 7u);
        Loops::SrBytes(SrRun{key0_, key1_, first >> 3, kColwiseStream},
                       (skip + rows + 7) / 8, s_.run_bytes);
        for (int i = 0; i < rows; ++i) {
          s_.col_sr_bytes[i][j] = s_.run_bytes[skip + i];
        }
      }
    }
  }

  void Colwise(int64_t ai, int64_t k0, int rows, const Chunk& ch) {
    const int64_t width = ch.width();
    const float(*vals)[kChunk] = s_.x;
    if (pr_.use_rht) {  // rows == 16 (K % 16 == 0)
      Loops::Rht(&s_.x[0][0], kChunk, width, rht_, &s_.rht[0][0]);
      vals = s_.rht;
    }
    if (pr_.use_2d) {
      Loops::Scales(s_.tile_key, ch.blocks(), col_t_, s_.tile_sdb, s_.tile_enc);
      for (int64_t j = 0; j < width; ++j) {
        s_.col_sdb[j] = s_.tile_sdb[j / kB];
        s_.col_enc[j] = s_.tile_enc[j / kB];
      }
    } else {
      std::fill(s_.col_key, s_.col_key + width, 0u);
      for (int i = 0; i < rows; ++i) Loops::MaxKeys(vals[i], width, s_.col_key);
      Loops::Scales(s_.col_key, width, col_t_, s_.col_sdb, s_.col_enc);
    }
    if (sr_ != nullptr) ColwiseSrBytes(ai, k0, rows, ch);
    for (int i = 0; i < rows; ++i) {
      if (sr_ == nullptr) {
        Loops::Codes(vals[i], s_.col_enc, width, s_.codes[i]);
      } else {
        Loops::CodesSr(vals[i], s_.col_enc, width, s_.col_sr_bytes[i],
                       s_.codes[i]);
      }
    }
    // Transposed write: position (c, l) -> col[c][l][a][k0 .. k0 + rows).
    const int64_t k_blocks = CeilDiv(k_, kB);
    for (int64_t cc = 0; cc < ch.nc; ++cc) {
      const int64_t first_column = ((ch.c0 + cc) * l_ + ch.l0) * a_ + ai;
      for (int64_t jl = 0; jl < ch.nl; jl += kB) {
        const int count = static_cast<int>(std::min<int64_t>(kB, ch.nl - jl));
        col_.Columns(&s_.codes[0][0], kChunk, cc * ch.nlp + jl, count, rows,
                     (first_column + jl * a_) * k_ + k0, a_ * k_);
      }
      for (int64_t jl = 0; jl < ch.nl; ++jl) {
        col_scale_[(first_column + jl * a_) * k_blocks + k0 / kB] =
            s_.col_sdb[cc * ch.nlp + jl];
      }
    }
  }

  const Nvfp4QuantizeProblem& pr_;
  const int64_t a_, k_, c_, l_;
  const ChunkPlan& chunks_;
  const SrIndex* sr_;
  const RhtMatrix& rht_;
  Scratch& s_;
  const Storage* x_ = nullptr;
  CodeOut row_;
  uint8_t* row_scale_ = nullptr;
  CodeOut col_;
  uint8_t* col_scale_ = nullptr;
  Nvfp4TensorScale row_t_{};
  Nvfp4TensorScale col_t_{};
  uint32_t key0_ = 0;
  uint32_t key1_ = 0;
  uint32_t seg_last_ = 0;  // SR: the last dim's index term of the chunk's l0
};

template <typename Input, typename Loops>
void QuantizeAll(const Nvfp4QuantizeProblem& pr,
                 const Nvfp4QuantizeBuffers& buf, const ParallelFor& parallel) {
  const Nvfp4View& v = pr.view;
  const int64_t elements = v.a * v.k * v.c * v.l;
  if (elements == 0) return;
  const int64_t row_scales = v.a * v.k * v.c * CeilDiv(v.l, kB);
  const int64_t col_scales = v.c * v.l * v.a * CeilDiv(v.k, kB);
  const int n = static_cast<int>(v.shape.size());
  // Without colwise and 2D parts, the rows (a, k, c) are independent: walk
  // them as one run of C' = A * K * C rows (the dims S[:n-1]).
  const bool rows_only = !pr.colwise && !pr.use_2d;
  const int64_t a = rows_only ? 1 : v.a;
  const int64_t k = rows_only ? 1 : v.k;
  const int64_t c = rows_only ? v.a * v.k * v.c : v.c;
  const int k_axis = rows_only ? -1 : static_cast<int>(v.k_axis);
  const int a_end = rows_only ? 0 : (k_axis >= 0 ? k_axis : n - 1);
  const int c_begin = rows_only ? 0 : (k_axis >= 0 ? k_axis + 1 : n - 1);

  const ChunkPlan chunks(c, v.l);
  const ItemPlan items(a, k, chunks);
  const RhtMatrix rht = MakeRhtMatrix(pr.rht_sign_mask);
  std::unique_ptr<SrIndex> sr;
  if (pr.stochastic_rounding) {
    sr = std::make_unique<SrIndex>(v.shape, pr.global_shape, buf.offset, a_end,
                                   k_axis, c_begin);
  }
  // Two codes share a byte: the items may go to different threads only when
  // every run of codes they write starts and ends on a byte boundary (rowwise
  // runs are 16-aligned pieces of L-long lines, colwise ones of K-long
  // columns).
  const bool whole_bytes = buf.code_first % 2 == 0 &&
                           (!pr.rowwise || v.l % 2 == 0) &&
                           (!pr.colwise || v.k % 2 == 0);
  const ParallelFor serial;
  const ParallelFor& split = whole_bytes ? parallel : serial;
  const int64_t item_elements =
      std::max<int64_t>(1, elements / std::max<int64_t>(1, items.count));
  const int64_t min_items = CeilDiv(kMinTaskElements, item_elements);
  const auto* x = static_cast<const typename Input::Storage*>(buf.x);
  for (int64_t p = 0; p < v.batch; ++p) {
    const uint32_t key0 = pr.stochastic_rounding ? buf.key[2 * p] : 0;
    const uint32_t key1 = pr.stochastic_rounding ? buf.key[2 * p + 1] : 0;
    // Example p's codes are the elements code_first + p * elements .. of
    // row / col.
    const CodeOut row{buf.row, buf.code_first + p * elements};
    const CodeOut col{buf.col, buf.code_first + p * elements};
    ParallelRanges(
        split, items.count, min_items, 1, [&](int64_t begin, int64_t end) {
          ExampleQuantizer<Input, Loops> quantizer(
              pr, a, k, c, v.l, chunks, sr.get(), rht, ThreadScratch());
          quantizer.Start(x + p * elements, row,
                          pr.rowwise ? buf.row_scale + p * row_scales : nullptr,
                          col,
                          pr.colwise ? buf.col_scale + p * col_scales : nullptr,
                          buf.amax[p], buf.col_amax[p], key0, key1);
          quantizer.Items(items, begin, end);
        });
  }
}

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

template <typename Input, typename Loops>
struct QuantizeFn {
  static void Run(const Nvfp4QuantizeProblem& p, const Nvfp4QuantizeBuffers& b,
                  const ParallelFor& parallel) {
    QuantizeAll<Input, Loops>(p, b, parallel);
  }
};

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

void Nvfp4Quantize(const Nvfp4QuantizeProblem& problem,
                   const Nvfp4QuantizeBuffers& buffers,
                   const ParallelFor& parallel) {
  Dispatch<QuantizeFn>(problem, buffers, parallel);
}

}  // namespace eqx_quant::cpu
