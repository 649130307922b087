// A fresh directory under the system's temporary folder, made with mkdtemp
// (so parallel tests never share one) and removed with its contents when the
// object goes. One class for every test that writes files.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "framework/error.h"

namespace kiln {
namespace test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "kiln_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    KILN_CHECK(mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // The names of the entries directly inside, in directory order.
  std::vector<std::string> Entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) out.push_back(e.path().filename().string());
    return out;
  }

 private:
  std::string path_;
};

}  // namespace test
}  // namespace kiln
