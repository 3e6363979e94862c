// XLA FFI handler (CPU) of eqx_quant_group_sizes_check (docs/grouped.md,
// "Checks"): the run-time check of a grouped op's group sizes under `jit`.
//
//   Arg 0  group_sizes  S32   Bt + (G,)
//   Ret 0  out          S32   Bt + (G,)   a copy of group_sizes
//   Attrs  total: int64 (the rows the sizes must sum to), fn: string (the
//          public function), operand: string (the name of its token matrix)
//
// A bad vector fails the call with INVALID_ARGUMENT and a message that says
// what came and how to fix it. XLA puts a handler's message on the first
// line of the error a `jit` call raises; a host callback's message would come
// last, under its Python traceback.

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

// Sizes listed in full up to this many; longer vectors are cut in the middle.
constexpr int64_t kListedSizes = 16;

std::string SizesText(const int32_t* sizes, int64_t groups) {
  std::string text = "[";
  for (int64_t g = 0; g < groups; ++g) {
    if (groups > kListedSizes && g == kListedSizes / 2) {
      text += "..., ";
      g = groups - kListedSizes / 2;
    }
    text += std::to_string(sizes[g]);
    if (g + 1 < groups) text += ", ";
  }
  return text + "]";
}

// Whether one example's sizes are non-negative and sum to `total` (in int64:
// no int32 wrap-around can make a bad vector look good).
bool SizesAreGood(const int32_t* sizes, int64_t groups, int64_t total,
                  int64_t* sum) {
  bool non_negative = true;
  *sum = 0;
  for (int64_t g = 0; g < groups; ++g) {
    *sum += sizes[g];
    non_negative = non_negative && sizes[g] >= 0;
  }
  return non_negative && *sum == total;
}

ffi::Error GroupSizesCheckCpuImpl(ffi::AnyBuffer group_sizes,
                                  ffi::Result<ffi::AnyBuffer> out,
                                  int64_t total, std::string_view fn,
                                  std::string_view operand) {
  if (group_sizes.element_type() != ffi::DataType::S32 ||
      out->element_type() != ffi::DataType::S32 ||
      group_sizes.dimensions().size() == 0 ||
      out->element_count() != group_sizes.element_count()) {
    return ffi::Error::InvalidArgument(
        "eqx_quant_group_sizes_check: group_sizes must be an int32 array of "
        "rank >= 1 and the result an int32 array of its size.");
  }
  const auto* sizes = static_cast<const int32_t*>(group_sizes.untyped_data());
  const int64_t count = static_cast<int64_t>(group_sizes.element_count());
  const int64_t groups = group_sizes.dimensions().back();
  const bool batched = group_sizes.dimensions().size() > 1;
  for (int64_t example = 0; groups > 0 && example < count / groups;
       ++example) {
    const int32_t* example_sizes = sizes + example * groups;
    int64_t sum = 0;
    if (SizesAreGood(example_sizes, groups, total, &sum)) continue;
    // The words of the eager check (eqx_quant/_quantize/_grouped.py,
    // check_sizes_now), so that one message is learnt for both.
    std::string where =
        batched ? " in example " + std::to_string(example) + " of the batch"
                : "";
    return ffi::Error::InvalidArgument(
        "eqx_quant." + std::string(fn) +
        ": group_sizes must be non-negative and sum to " +
        std::string(operand) + ".shape[0] = " + std::to_string(total) +
        ", got " + SizesText(example_sizes, groups) + " (sum " +
        std::to_string(sum) + ")" + where +
        ". Rows past the sum would be zero in the output; pass check=False to "
        "allow that.");
  }
  if (count > 0) {
    std::memcpy(out->untyped_data(), sizes,
                static_cast<size_t>(count) * sizeof(int32_t));
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupSizesCheckCpu,
                              eqx_quant::GroupSizesCheckCpuImpl,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Attr<int64_t>("total")
                                  .Attr<std::string_view>("fn")
                                  .Attr<std::string_view>("operand"));
