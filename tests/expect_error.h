// Runs fn and expects a kiln::Error with `code` whose message contains every
// one of `pieces`: the check of the data and file-format tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "framework/error.h"

namespace kiln {
namespace test {

inline void ExpectError(const std::function<void()>& fn, ErrorCode code, const std::vector<std::string>& pieces) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(ErrorCodeName(e.code()), std::string(ErrorCodeName(code))) << e.what();
    for (const std::string& p : pieces) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    return;
  }
  ADD_FAILURE() << "no kiln::Error thrown";
}

}  // namespace test
}  // namespace kiln
