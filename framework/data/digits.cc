#include "framework/data/digits.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <string_view>
#include <vector>

#include "framework/data/gzip_file.h"

namespace kiln {
namespace {

constexpr int64_t kValuesPerRow = kDigitsPixels + 1;
constexpr double kMaxPixel = 16.0;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// A decimal number as CSV writers produce it ("3", "3.0", "-1e2"); false for
// anything else, including nan, inf and hex.
bool ParseNumber(std::string_view s, double* out) {
  if (s.empty()) return false;
  const char* end = s.data() + s.size();
  const char* begin = s.data();
  if (*begin == '+') ++begin;  // from_chars rejects a leading '+'
  auto [ptr, ec] = std::from_chars(begin, end, *out, std::chars_format::general);
  return ec == std::errc() && ptr == end && std::isfinite(*out);
}

}  // namespace

std::string DefaultDigitsPath() {
  std::vector<std::string> candidates = {kDefaultDigitsPath};
#ifdef KILN_SOURCE_DATA_DIR
  candidates.push_back(std::string(KILN_SOURCE_DATA_DIR) + "/digits.csv.gz");
#endif
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back((exe.parent_path() / "../../tools/data/digits.csv.gz").string());
    // An installed kiln (cmake --install): PREFIX/bin/kiln, PREFIX/share/kiln/.
    candidates.push_back((exe.parent_path() / "../share/kiln/digits.csv.gz").string());
  }
  for (const auto& c : candidates) {
    if (std::filesystem::is_regular_file(c, ec)) return c;
  }
  return kDefaultDigitsPath;
}

Dataset LoadDigitsCsv(const std::string& path) {
  const std::string text = ReadMaybeGzippedFile(path);
  auto fail = [&](int64_t row, const auto&... what) {
    ThrowInvalidArgument("digits file '", path, "': row ", row, ": ", what...);
  };

  std::vector<float> pixels;
  std::vector<int64_t> labels;
  std::string_view rest(text);
  // A final newline ends the last row; it does not start an empty one.
  while (!rest.empty() && (rest.back() == '\n' || rest.back() == '\r')) rest.remove_suffix(1);
  if (Trim(rest).empty()) {
    ThrowInvalidArgument("digits file '", path, "': empty file, expected rows of ", kValuesPerRow,
                         " values (64 pixels, then the label)");
  }

  int64_t row = 0;
  std::vector<std::string_view> fields;
  do {
    ++row;
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (Trim(line).empty()) fail(row, "empty line, expected ", kValuesPerRow, " values");

    fields.clear();
    for (;;) {
      size_t comma = line.find(',');
      fields.push_back(Trim(line.substr(0, comma)));
      if (comma == std::string_view::npos) break;
      line.remove_prefix(comma + 1);
    }
    if (static_cast<int64_t>(fields.size()) != kValuesPerRow) {
      fail(row, "expected ", kValuesPerRow, " values, got ", fields.size());
    }
    for (int64_t col = 0; col < kValuesPerRow; ++col) {
      double v = 0;
      if (!ParseNumber(fields[col], &v)) {
        fail(row, "column ", col + 1, ": '", std::string(fields[col]), "' is not a number");
      }
      if (col < kDigitsPixels) {
        if (v < 0 || v > kMaxPixel) fail(row, "column ", col + 1, ": pixel ", v, " outside 0-16");
        pixels.push_back(static_cast<float>(v / kMaxPixel));
      } else {
        if (v < 0 || v >= kDigitsClasses) fail(row, "column ", col + 1, ": label ", v, " outside 0-9");
        if (v != std::floor(v)) fail(row, "column ", col + 1, ": label ", v, " is not an integer");
        labels.push_back(static_cast<int64_t>(v));
      }
    }
  } while (!rest.empty());

  const auto n = static_cast<int64_t>(labels.size());
  Dataset data;
  data.features = Tensor(DataType::kFP32, {n, kDigitsPixels});
  std::copy(pixels.begin(), pixels.end(), data.features.mutable_data<float>());
  data.labels = Tensor(DataType::kINT64, {n, 1});
  std::copy(labels.begin(), labels.end(), data.labels.mutable_data<int64_t>());
  return data;
}

DigitsSplit LoadDigits(const std::string& path, uint64_t seed, double train_fraction) {
  auto [train, test] = SplitDataset(ShuffleDataset(LoadDigitsCsv(path), seed), train_fraction);
  return {std::move(train), std::move(test)};
}

}  // namespace kiln
