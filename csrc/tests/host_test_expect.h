// The check counter of the standalone host tests (csrc/tests/*_test.cc, run
// by tests/kernels/test_host_cpp.py): EXPECT(cond, printf-format, ...) counts one
// check and prints the first 20 failures with their file and line; a test's
// main() reports `checks` and `failures` and exits non-zero on a failure.

#ifndef EQX_QUANT_CSRC_TESTS_HOST_TEST_EXPECT_H_
#define EQX_QUANT_CSRC_TESTS_HOST_TEST_EXPECT_H_

#include <cstdint>
#include <cstdio>

namespace eqx_quant::host_test {

inline int failures = 0;
inline int64_t checks = 0;

}  // namespace eqx_quant::host_test

#define EXPECT(cond, ...)                                               \
  do {                                                                  \
    ++::eqx_quant::host_test::checks;                                   \
    if (!(cond)) {                                                      \
      if (++::eqx_quant::host_test::failures <= 20) {                   \
        std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);     \
        std::printf(__VA_ARGS__);                                       \
        std::printf("\n");                                              \
      }                                                                 \
    }                                                                   \
  } while (0)

#endif  // EQX_QUANT_CSRC_TESTS_HOST_TEST_EXPECT_H_
