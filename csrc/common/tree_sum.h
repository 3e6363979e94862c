// The canonical pairwise-tree summation used for reductions that must give the
// same bits however the reduced axis is split (e.g. across shards).
//
// For a sequence v[0..n) of f32 values (here: f32 vectors, added elementwise):
//   T()        = +0.0f                                   (n == 0)
//   T(v)       = v[0]                                    (n == 1)
//   T(v[0..n)) = T(v[0..h)) + T(v[h..n)),  h = (n + 1) / 2 (n >= 2)
// where "+" is one IEEE f32 add. For n = 3 this is (v0 + v1) + v2; for n = 5,
// ((v0 + v1) + v2) + (v3 + v4).
//
// Each tree node is a vector of `width` floats, so every add is a vector
// operation over all columns; the recursion is over rows only. The routine
// keeps at most TreeSumDepth(n) partial vectors in caller-provided scratch.
// Header-only, no dependencies beyond the standard library.

#ifndef EQX_QUANT_CSRC_COMMON_TREE_SUM_H_
#define EQX_QUANT_CSRC_COMMON_TREE_SUM_H_

#include <cstdint>

namespace eqx_quant {

// Number of scratch vectors TreeSum needs for `count` leaves: ceil(log2(count))
// (0 for count <= 1).
inline int TreeSumDepth(int64_t count) {
  int depth = 0;
  while ((int64_t{1} << depth) < count) ++depth;
  return depth;
}

// dst[j] += src[j] for j in [0, width), one f32 add per element.
inline void AddVectorInPlace(float* __restrict dst, const float* __restrict src,
                             int64_t width) {
  for (int64_t j = 0; j < width; ++j) dst[j] += src[j];
}

// Writes T(leaf(begin), ..., leaf(begin + count - 1)) to dst[0..width).
//
// `leaf(i, out, free_scratch)` must write the i-th vector to out[0..width).
// The leaves are requested in increasing order of i, each exactly once. A
// leaf may itself use `free_scratch` as scratch (e.g. to run a nested
// TreeSum), from its start up to the end of the caller's buffer.
//
// `scratch` must have room for TreeSumDepth(count) * width floats plus
// whatever the leaves use from the scratch they are given.
template <typename LeafFn>
void TreeSum(int64_t begin, int64_t count, int64_t width, LeafFn& leaf,
             float* dst, float* scratch) {
  if (count <= 0) {
    for (int64_t j = 0; j < width; ++j) dst[j] = 0.0f;
    return;
  }
  if (count == 1) {
    leaf(begin, dst, scratch);
    return;
  }
  const int64_t half = (count + 1) / 2;
  // Left subtree straight into dst; it may use all of scratch.
  TreeSum(begin, half, width, leaf, dst, scratch);
  // Right subtree into scratch slot 0; it uses the slots after it.
  TreeSum(begin + half, count - half, width, leaf, scratch, scratch + width);
  AddVectorInPlace(dst, scratch, width);
}

// Number of scratch vectors NestedTreeSum needs for reduced axes `dims`.
inline int64_t NestedTreeSumScratchVectors(const int64_t* dims, int num_dims) {
  int64_t vectors = 0;
  for (int axis = 0; axis < num_dims; ++axis) {
    vectors += TreeSumDepth(dims[axis]);
  }
  return vectors;
}

namespace tree_sum_internal {

// The leaves of one level of a nested tree: leaf i of this level is the tree
// over the next axis (or, below the last axis, a row) starting at row
// first_row + i * row_stride.
template <typename RowFn>
struct NestedLeaf {
  const int64_t* dims;  // the axes below this level
  int num_dims;
  int64_t row_stride;  // rows per index of this level = prod(dims[0..num_dims))
  int64_t first_row;
  int64_t width;
  RowFn* row;

  void operator()(int64_t i, float* out, float* free_scratch) {
    const int64_t row_begin = first_row + i * row_stride;
    if (num_dims == 0) {
      (*row)(row_begin, out);
      return;
    }
    NestedLeaf<RowFn> inner{dims + 1,  num_dims - 1, row_stride / dims[0],
                            row_begin, width,        row};
    TreeSum(0, dims[0], width, inner, out, free_scratch);
  }
};

}  // namespace tree_sum_internal

// Nested tree over several reduced axes, innermost axis first:
//   dst = T_{i_0 < dims[0]}( T_{i_1 < dims[1]}( ... T_{i_{q-1}}( row(r) ) ) )
// with r = first_row + ((i_0 * dims[1] + i_1) * dims[2] + ...) + i_{q-1}, i.e.
// the rows [first_row, first_row + prod(dims)) in row-major order. With
// num_dims == 0 the result is row(first_row). If some dim is 0 the result is
// +0.0f and no row is requested.
//
// `row(r, out)` writes row r's vector to out[0..width); rows are requested in
// increasing order, each exactly once.
// `scratch` needs NestedTreeSumScratchVectors(dims, num_dims) * width floats.
template <typename RowFn>
void NestedTreeSum(const int64_t* dims, int num_dims, int64_t first_row,
                   int64_t width, RowFn& row, float* dst, float* scratch) {
  if (num_dims == 0) {
    row(first_row, dst);
    return;
  }
  int64_t rows_below = 1;
  for (int axis = 0; axis < num_dims; ++axis) {
    if (dims[axis] == 0) {
      for (int64_t j = 0; j < width; ++j) dst[j] = 0.0f;
      return;
    }
    if (axis > 0) rows_below *= dims[axis];
  }
  tree_sum_internal::NestedLeaf<RowFn> level{
      dims + 1, num_dims - 1, rows_below, first_row, width, &row};
  TreeSum(0, dims[0], width, level, dst, scratch);
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_TREE_SUM_H_
