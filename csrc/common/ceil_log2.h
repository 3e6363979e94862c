// ceil(log2(n)) of a count, for host and device code.

#ifndef EQX_QUANT_CSRC_COMMON_CEIL_LOG2_H_
#define EQX_QUANT_CSRC_COMMON_CEIL_LOG2_H_

#include <cstdint>

#include "common/host_device.h"

namespace eqx_quant {

// ceil(log2(n)) for n >= 1; 0 for n <= 1.
EQX_QUANT_HOST_DEVICE inline int CeilLog2(int64_t n) {
  int bits = 0;
  while ((int64_t{1} << bits) < n) ++bits;
  return bits;
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_CEIL_LOG2_H_
