// For tests of runs that must stop with an error: the message Trainer::run() throws (""
// when it ends normally), and EXPECT_MENTIONS(message, text) for its parts.
#pragma once

#include "train/trainer.h"

#include <gtest/gtest.h>

#include <string>

#define EXPECT_MENTIONS(message, text) \
  EXPECT_NE(std::string(message).find(text), std::string::npos) << "message lacks '" << (text) << "': " << (message)

namespace ndt::testing {

inline std::string run_error(Trainer& trainer) {
  try {
    trainer.run();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace ndt::testing
