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

namespace kiln {
namespace data_test {

namespace fs = std::filesystem;

inline std::string DigitsPath() { return std::string(KILN_SOURCE_DIR) + "/" + kDefaultDigitsPath; }

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "kiln_data_test_XXXXXX").string();
    KILN_CHECK(mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

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

// Features [N, F] with row i = {i, i + 0.5, ...} and label 100 + i, so a
// batch row shows which dataset row it came from and that its label matches.
inline Dataset Numbered(int64_t n, int64_t f = 3) {
  Dataset d;
  d.features = Tensor(DataType::kFP32, {n, f});
  d.labels = Tensor(DataType::kINT64, {n, 1});
  float* x = d.features.mutable_data<float>();
  int64_t* y = d.labels.mutable_data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < f; ++j) x[i * f + j] = static_cast<float>(i) + 0.5f * static_cast<float>(j);
    y[i] = 100 + i;
  }
  return d;
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
