// Helpers of the data tests (data_test, dataset_test): a temporary
// directory, plain and gzipped files, error checks, small numbered datasets.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "framework/data/dataset.h"
#include "framework/data/digits.h"
#include "framework/data/idx.h"
#include "framework/data/synthetic.h"
#include "tests/expect_error.h"
#include "tests/numbered_dataset.h"
#include "tests/temp_dir.h"

namespace kiln {
namespace data_test {

namespace fs = std::filesystem;
using test::ExpectError;
using test::Numbered;
using test::TempDir;

inline std::string DigitsPath() { return std::string(KILN_SOURCE_DIR) + "/" + kDefaultDigitsPath; }

inline void WritePlain(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  ASSERT_TRUE(out.good());
}

inline void WriteGzip(const std::string& path, const std::string& content) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, content.data(), static_cast<unsigned>(content.size())), static_cast<int>(content.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// Dataset rows as strings (features bytes + label), sorted: equal multisets
// of rows give equal results.
inline std::vector<std::string> SortedRows(const std::vector<const Dataset*>& parts) {
  std::vector<std::string> rows;
  for (const Dataset* d : parts) {
    const int64_t n = d->size();
    const size_t row_bytes = n ? d->features.bytes() / n : 0;
    for (int64_t i = 0; i < n; ++i) {
      std::string r(static_cast<const char*>(d->features.raw_data()) + i * row_bytes, row_bytes);
      r += std::to_string(d->labels.data<int64_t>()[i]);
      rows.push_back(r);
    }
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

}  // namespace data_test
}  // namespace kiln
