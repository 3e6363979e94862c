// XLA FFI handler (CPU) of eqx_quant_group_sizes_check (docs/grouped.md,
// "Checks"): the run-time check of a grouped op's group sizes under `jit`.
//
//   Arg 0  group_sizes  S32   Bt + (G,)
//   Ret 0  out          S32   Bt + (G,)   a copy of group_sizes
//   Attrs  total: int64 (the rows the sizes must sum to), fn: string (the
//          public function), operand: string (the name of its token matrix)
//
// A bad vector fails the call with INVALID_ARGUMENT and the message of
// grouped/sizes_check.h. XLA puts a handler's message on the first
// line of the error a `jit` call raises; a host callback's message would come
// last, under its Python traceback.

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "grouped/sizes_check.h"
#include "grouped/sizes_check_args.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error GroupSizesCheckCpuImpl(ffi::AnyBuffer group_sizes,
                                  ffi::Result<ffi::AnyBuffer> out,
                                  int64_t total, std::string_view fn,
                                  std::string_view operand) {
  ffi::Error invalid = sizes_check::CheckOperands("eqx_quant_group_sizes_check",
                                                   group_sizes, *out);
  if (invalid.failure()) return invalid;
  const auto* sizes = static_cast<const int32_t*>(group_sizes.untyped_data());
  const int64_t count = static_cast<int64_t>(group_sizes.element_count());
  const int64_t groups = group_sizes.dimensions().back();
  const bool batched = group_sizes.dimensions().size() > 1;
  const std::string bad = sizes_check::FirstBadExample(
      sizes, count, groups, batched, total, fn, operand);
  if (!bad.empty()) return ffi::Error::InvalidArgument(bad);
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
