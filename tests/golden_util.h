// Golden files of the pass and lowering tests: KILN_UPDATE_GOLDEN=1 rewrites
// them from what the code makes now (review the diff before committing);
// otherwise a test fails where a file differs from it.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "framework/file_util.h"

namespace kiln::test {

inline bool UpdateGolden() {
  const char* e = std::getenv("KILN_UPDATE_GOLDEN");
  return e != nullptr && std::string(e) == "1";
}

// Under KILN_UPDATE_GOLDEN=1 writes `text` to `path`; else expects the file
// to hold exactly `text`.
inline void ExpectGolden(const std::string& path, const std::string& text) {
  if (UpdateGolden()) {
    WriteFileAtomic(path, text);
  } else {
    EXPECT_EQ(ReadFile(path), text) << "golden " << path
                                    << " differs; regenerate with KILN_UPDATE_GOLDEN=1 and review the diff";
  }
}

}  // namespace kiln::test
