// expect_error(f, parts): f() must throw ndt::Error whose message contains every part.
#pragma once

#include "core/error.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ndt::testing {

template <typename F>
void expect_error(F f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected ndt::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(msg.find(p), std::string::npos) << "message lacks '" << p << "': " << msg;
    }
  }
}

}  // namespace ndt::testing
