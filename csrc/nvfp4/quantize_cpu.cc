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
#include "nvfp4/panel_cpu.h"

namespace eqx_quant::cpu {
namespace {

using nvfp4_loops::Bf16Input;
using nvfp4_loops::CodeOut;
using nvfp4_loops::F16Input;
using nvfp4_loops::F32Input;
using nvfp4_loops::kB;
using nvfp4_loops::SrRun;

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

template <typename Input, typename Loops>
struct QuantizeFn {
  static void Run(const Nvfp4QuantizeProblem& p, const Nvfp4QuantizeBuffers& b,
                  const ParallelFor& parallel) {
    QuantizeAll<Input, Loops>(p, b, parallel);
  }
};

}  // namespace

void Nvfp4Quantize(const Nvfp4QuantizeProblem& problem,
                   const Nvfp4QuantizeBuffers& buffers,
                   const ParallelFor& parallel) {
  Dispatch<QuantizeFn>(problem, buffers, parallel);
}

}  // namespace eqx_quant::cpu
