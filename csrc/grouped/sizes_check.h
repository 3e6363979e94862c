// The group-sizes check of eqx_quant_group_sizes_check (docs/grouped.md,
// "Checks"), shared by its CPU and CUDA handlers: whether one example's sizes
// are good, and the message that says what came and how to fix it (the words
// of the eager check, eqx_quant/_quantize/_grouped.py check_sizes_now, so that
// one message is learnt for every path). Host code; no XLA types.

#ifndef EQX_QUANT_GROUPED_SIZES_CHECK_H_
#define EQX_QUANT_GROUPED_SIZES_CHECK_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace eqx_quant::sizes_check {

// Sizes listed in full up to this many; longer vectors are cut in the middle.
constexpr int64_t kListedSizes = 16;

inline std::string SizesText(const int32_t* sizes, int64_t groups) {
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
inline bool SizesAreGood(const int32_t* sizes, int64_t groups, int64_t total,
                         int64_t* sum) {
  bool non_negative = true;
  *sum = 0;
  for (int64_t g = 0; g < groups; ++g) {
    *sum += sizes[g];
    non_negative = non_negative && sizes[g] >= 0;
  }
  return non_negative && *sum == total;
}

// The first bad example's message, or "" when every example of the `count`
// sizes (examples of `groups` each) is good.
inline std::string FirstBadExample(const int32_t* sizes, int64_t count,
                                   int64_t groups, bool batched, int64_t total,
                                   std::string_view fn,
                                   std::string_view operand) {
  for (int64_t example = 0; groups > 0 && example < count / groups;
       ++example) {
    const int32_t* example_sizes = sizes + example * groups;
    int64_t sum = 0;
    if (SizesAreGood(example_sizes, groups, total, &sum)) continue;
    std::string where =
        batched ? " in example " + std::to_string(example) + " of the batch"
                : "";
    return "eqx_quant." + std::string(fn) +
           ": group_sizes must be non-negative and sum to " +
           std::string(operand) + ".shape[0] = " + std::to_string(total) +
           ", got " + SizesText(example_sizes, groups) + " (sum " +
           std::to_string(sum) + ")" + where +
           ". Rows past the sum would be zero in the output; pass check=False "
           "to allow that.";
  }
  return "";
}

}  // namespace eqx_quant::sizes_check

#endif  // EQX_QUANT_GROUPED_SIZES_CHECK_H_
