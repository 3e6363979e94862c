// What the two rowwise-only grouped kernels share (sm_90a): the MXFP8 and
// NVFP4 RowOctetKernels (grouped/mxfp8_row_cuda.cuh,
// grouped/nvfp4_row_cuda.cu). A CTA owns one row octet of a 128-row unit
// (aligned at its group's start) over a chunk of columns: warp q (0..7) owns
// unit row 2 * octet + (q & 1) + 32 * (q >> 1), the 8 rows whose scale bytes
// fill one 32-byte sector of each cuBLAS 128 x 4 scale tile. Items (the grid's
// x) are (unit * 16 + octet) * chunks + chunk over units [0, max(W,
// ceil(R / 128))), W = WorstCaseUnits(R, G, 128) (grouped_dev::
// WholeTileUnits).

#ifndef EQX_QUANT_CSRC_GROUPED_ROW_OCTET_CUDA_CUH_
#define EQX_QUANT_CSRC_GROUPED_ROW_OCTET_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/grouped_layout.h"
#include "common/grouped_problem.h"
#include "grouped/device_cuda.cuh"

namespace eqx_quant::cuda::grouped_row {

constexpr int kUnitRows = grouped_dev::kScaleUnitRows;  // 128
constexpr int kOctets = kUnitRows / 8;  // 16 per unit
constexpr int kTileBytes = 512;         // one 128 x 4 scale tile
constexpr int kSectorBytes = 32;        // one row octet of a tile
static_assert(grouped_dev::kWarps == 8, "a warp per row of the octet");

struct RowParams {
  const void* x;
  const int32_t* group_sizes;
  uint8_t* row;
  uint8_t* row_scale;
  grouped_dev::RowSpec rs;
  int64_t cols;  // N
  int64_t groups;
  int64_t row_scale_bytes;  // per example: worst_units * tiles_per_row * 512
  uint32_t chunks;          // ceil(N / the kernel's chunk columns)
  uint32_t tiles_per_row;   // ceil(N / (4 B)), B elements per block
  uint32_t worst_units;     // W(R, G, 128)
  const float* amax;        // NVFP4: batch x G group amaxes (MXFP8: unused)
  const uint32_t* keys;     // NVFP4 SR: batch x G x 2 key words (else unused)
};

// A CTA's item and its warp's row of the unit.
struct OctetItem {
  uint32_t unit;
  int octet;
  uint32_t chunk;
  int local_row;  // in the unit
};

__device__ __forceinline__ OctetItem OctetItemOf(uint32_t item,
                                                 uint32_t chunks) {
  const int q = static_cast<int>(threadIdx.x / 32);
  const uint32_t rest = item / chunks;
  OctetItem it;
  it.chunk = item - rest * chunks;
  it.unit = rest / kOctets;
  it.octet = static_cast<int>(rest % kOctets);
  it.local_row = 2 * it.octet + (q & 1) + 32 * (q >> 1);
  return it;
}

// The item's sector of its unit's first scale tile in example ex (the
// sector of column tile t is t * kTileBytes on).
__device__ __forceinline__ uint8_t* OctetSectors(const RowParams& p,
                                                 int64_t ex,
                                                 const OctetItem& it) {
  return p.row_scale + ex * p.row_scale_bytes +
         int64_t{it.unit} * p.tiles_per_row * kTileBytes +
         it.octet * kSectorBytes;
}

// Byte b of the sector of warp q's row for block column `block` of the
// sector's tile (block % 4 within the tile).
__device__ __forceinline__ int SectorByte(int q, int block) {
  return (q & 1) * 16 + (q >> 1) * 4 + block % 4;
}

// The parameters and grid of a row-octet kernel over chunks of `chunk_cols`
// columns with blocks of `block` elements; false (nothing set) when the
// items would not fit a 31-bit grid or the scale buffer is not exactly its
// worst-case length (the kernels write every byte of it).
template <typename Problem, typename Buffers>
bool MakeRowOctetLaunch(const Problem& problem, const Buffers& buffers,
                        int64_t chunk_cols, int64_t block, RowParams* p,
                        dim3* grid) {
  const GroupedView& v = problem.view;
  const int64_t chunks = grouped::CeilDiv(v.cols, chunk_cols);
  const grouped_dev::WholeTileUnits units =
      grouped_dev::WholeTileUnits::Of(v, block);
  if (units.grid * kOctets * chunks > int64_t{0x7FFFFFFF} ||
      problem.row_scale_bytes != units.ScaleBytes()) {
    return false;
  }
  *p = RowParams{};
  p->x = buffers.x;
  p->group_sizes = buffers.group_sizes;
  p->row = buffers.row;
  p->row_scale = buffers.row_scale;
  p->rs = grouped_dev::RowSpec::Make(v.rows, v.rows_per_unit);
  p->cols = v.cols;
  p->groups = v.groups;
  p->row_scale_bytes = problem.row_scale_bytes;
  p->chunks = static_cast<uint32_t>(chunks);
  p->tiles_per_row = static_cast<uint32_t>(units.tiles_per_row);
  p->worst_units = static_cast<uint32_t>(units.worst);
  *grid = dim3(static_cast<unsigned>(units.grid * kOctets * chunks),
               static_cast<unsigned>(v.batch));
  return true;
}

}  // namespace eqx_quant::cuda::grouped_row

#endif  // EQX_QUANT_CSRC_GROUPED_ROW_OCTET_CUDA_CUH_
