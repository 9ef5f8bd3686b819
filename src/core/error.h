// Errors: one exception type whose message names the setting and the value.
// Thrown anywhere, caught once at the top of the CLI and printed on rank 0.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace ndt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ndt

// NDT_CHECK(cond, "format {}", args...): throws ndt::Error with the formatted message.
#define NDT_CHECK(cond, ...)      \
  do {                            \
    if (!(cond)) {                \
      ::ndt::fail(__VA_ARGS__);   \
    }                             \
  } while (0)
