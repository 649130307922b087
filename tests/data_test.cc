// The dataset file loaders: the digits CSV (plain and gzipped) and IDX
// files (MNIST, Fashion-MNIST), with errors that name the file, row and
// column. Datasets in memory: dataset_test.
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
#include "tests/data_test_util.h"

namespace kiln {
namespace {

using namespace data_test;  // the helpers shared by the split files (tests/data_test_util.h)

// ---------------------------------------------------------------- digits

TEST(DigitsTest, LoadsAllRowsScaledToUnitRange) {
  Dataset d = LoadDigitsCsv(DigitsPath());
  EXPECT_EQ(d.features.ShapeString(), "f32[1797,64]");
  EXPECT_EQ(d.labels.ShapeString(), "i64[1797,1]");
  EXPECT_EQ(d.size(), 1797);
  const float* x = d.features.data<float>();
  float lo = 1, hi = 0;
  for (int64_t i = 0; i < d.features.numel(); ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
  std::map<int64_t, int> counts;
  for (int64_t i = 0; i < d.size(); ++i) counts[d.labels.data<int64_t>()[i]]++;
  ASSERT_EQ(counts.size(), 10u);
  EXPECT_EQ(counts.begin()->first, 0);
  EXPECT_EQ(counts.rbegin()->first, 9);
  for (const auto& [label, count] : counts) EXPECT_GE(count, 170) << label;
  // First line: 0,0,5,13,9,1,0,0,0,0,13,15,...,0 (label 0); second ends in label 1.
  EXPECT_EQ(x[2], 5.0f / 16);
  EXPECT_EQ(x[3], 13.0f / 16);
  EXPECT_EQ(x[10], 13.0f / 16);
  EXPECT_EQ(d.labels.data<int64_t>()[0], 0);
  EXPECT_EQ(d.labels.data<int64_t>()[1], 1);
  EXPECT_EQ(d.labels.data<int64_t>()[2], 2);
}

TEST(DigitsTest, SeededSplitIsFixedAndKeepsEveryRow) {
  DigitsSplit a = LoadDigits(DigitsPath(), 7);
  DigitsSplit b = LoadDigits(DigitsPath(), 7);
  DigitsSplit c = LoadDigits(DigitsPath(), 8);
  EXPECT_EQ(a.train.size(), 1437);
  EXPECT_EQ(a.test.size(), 360);
  EXPECT_EQ(a.train.features.ShapeString(), "f32[1437,64]");
  EXPECT_EQ(a.test.labels.ShapeString(), "i64[360,1]");
  EXPECT_EQ(SortedRows({&a.train}), SortedRows({&b.train}));
  EXPECT_EQ(std::memcmp(a.train.features.raw_data(), b.train.features.raw_data(), a.train.features.bytes()), 0);
  EXPECT_NE(std::memcmp(a.train.features.raw_data(), c.train.features.raw_data(), a.train.features.bytes()), 0);
  // Train + test is a permutation of the file.
  Dataset full = LoadDigitsCsv(DigitsPath());
  EXPECT_EQ(SortedRows({&a.train, &a.test}), SortedRows({&full}));
  // The shuffle actually mixes: the test part is not just the file's tail.
  Dataset tail = SplitDataset(full, 0.8).second;
  EXPECT_NE(SortedRows({&a.test}), SortedRows({&tail}));
}

TEST(DigitsTest, ReadsPlainCsv) {
  TempDir dir;
  std::string row(127, '0');  // 64 zeros separated by commas
  for (size_t i = 1; i < row.size(); i += 2) row[i] = ',';
  row[0] = '1';
  row[2] = '6';
  // CRLF line ends, spaces around a value, a label written as a float.
  WritePlain(dir.File("d.csv"), row + ",3\r\n" + row + ", 9.0 \n");
  Dataset d = LoadDigitsCsv(dir.File("d.csv"));
  EXPECT_EQ(d.features.ShapeString(), "f32[2,64]");
  EXPECT_EQ(d.features.data<float>()[0], 1.0f / 16);
  EXPECT_EQ(d.features.data<float>()[1], 6.0f / 16);
  EXPECT_EQ(d.labels.data<int64_t>()[0], 3);
  EXPECT_EQ(d.labels.data<int64_t>()[1], 9);
}

TEST(DigitsTest, CorruptRowsNameFileRowAndColumn) {
  std::string good;
  for (int i = 0; i < 64; ++i) good += std::to_string(i % 17) + ",";
  good += "4";
  auto with_value = [&](int column, const std::string& value) {
    std::vector<std::string> fields;
    std::string field;
    for (char ch : good + ",") {
      if (ch == ',') {
        fields.push_back(field);
        field.clear();
      } else {
        field += ch;
      }
    }
    fields[column - 1] = value;
    std::string out;
    for (size_t i = 0; i < fields.size(); ++i) out += (i ? "," : "") + fields[i];
    return out;
  };
  struct Case {
    std::string third_row;
    std::vector<std::string> pieces;
  };
  std::string short_row = good.substr(0, good.rfind(','));
  std::vector<Case> cases = {
      {short_row, {"row 3: expected 65 values, got 64"}},
      {good + ",1", {"row 3: expected 65 values, got 66"}},
      {with_value(5, "abc"), {"row 3: column 5: 'abc' is not a number"}},
      {with_value(5, ""), {"row 3: column 5: '' is not a number"}},
      {with_value(7, "nan"), {"row 3: column 7: 'nan' is not a number"}},
      {with_value(9, "17"), {"row 3: column 9: pixel 17 outside 0-16"}},
      {with_value(1, "-1"), {"row 3: column 1: pixel -1 outside 0-16"}},
      {with_value(65, "10"), {"row 3: column 65: label 10 outside 0-9"}},
      {with_value(65, "2.5"), {"row 3: column 65: label 2.5 is not an integer"}},
      {"", {"row 3: empty line, expected 65 values"}},
  };
  TempDir dir;
  for (const Case& c : cases) {
    for (bool gz : {false, true}) {
      std::string path = dir.File(gz ? "bad.csv.gz" : "bad.csv");
      std::string text = good + "\n" + good + "\n" + c.third_row + "\n" + good + "\n";
      gz ? WriteGzip(path, text) : WritePlain(path, text);
      std::vector<std::string> pieces = c.pieces;
      pieces.push_back("digits file '" + path + "'");
      ExpectError([&] { LoadDigitsCsv(path); }, ErrorCode::kInvalidArgument, pieces);
    }
  }
}

TEST(DigitsTest, EmptyMissingAndTruncatedFiles) {
  TempDir dir;
  WritePlain(dir.File("empty.csv"), "");
  ExpectError([&] { LoadDigitsCsv(dir.File("empty.csv")); }, ErrorCode::kInvalidArgument,
              {dir.File("empty.csv"), "empty file"});
  WriteGzip(dir.File("empty.csv.gz"), "\n");
  ExpectError([&] { LoadDigitsCsv(dir.File("empty.csv.gz")); }, ErrorCode::kInvalidArgument, {"empty file"});
  ExpectError([&] { LoadDigitsCsv(dir.File("missing.csv.gz")); }, ErrorCode::kNotFound, {dir.File("missing.csv.gz")});

  // The real file cut in the middle of its gzip stream.
  std::ifstream in(DigitsPath(), std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  WritePlain(dir.File("cut.csv.gz"), gz.substr(0, gz.size() / 2));
  ExpectError([&] { LoadDigitsCsv(dir.File("cut.csv.gz")); }, ErrorCode::kDataLoss,
              {dir.File("cut.csv.gz"), "corrupt or truncated gzip data"});
}

// ---------------------------------------------------------------- IDX

std::string IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims, const std::string& data) {
  std::string out;
  auto put = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out += static_cast<char>((v >> s) & 0xff);
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  return out + data;
}

std::string Bytes(size_t n, int start = 0) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((start + i) % 256);
  return s;
}

TEST(IdxTest, ReadsImagesAndLabelsPlainAndGzipped) {
  TempDir dir;
  for (bool gz : {false, true}) {
    std::string images = dir.File(gz ? "im.gz" : "im");
    std::string labels = dir.File(gz ? "lb.gz" : "lb");
    auto write = gz ? WriteGzip : WritePlain;
    write(images, IdxBytes(kIdxImagesMagic, {3, 2, 2}, Bytes(12, 250)));
    write(labels, IdxBytes(kIdxLabelsMagic, {3}, std::string("\x07\x00\x09", 3)));
    Tensor x = LoadIdxImages(images);
    EXPECT_EQ(x.ShapeString(), "f32[3,1,2,2]");
    EXPECT_FLOAT_EQ(x.data<float>()[0], 250.0f / 255);
    EXPECT_FLOAT_EQ(x.data<float>()[5], 1.0f);
    EXPECT_FLOAT_EQ(x.data<float>()[6], 0.0f);
    EXPECT_FLOAT_EQ(x.data<float>()[11], 5.0f / 255);
    Tensor y = LoadIdxLabels(labels, 10);
    EXPECT_EQ(y.ShapeString(), "i64[3,1]");
    EXPECT_EQ(y.data<int64_t>()[0], 7);
    EXPECT_EQ(y.data<int64_t>()[1], 0);
    EXPECT_EQ(y.data<int64_t>()[2], 9);
    ExpectError([&] { LoadIdxLabels(labels, 9); }, ErrorCode::kInvalidArgument,
                {labels, "label 9 of item 2 outside 0-8"});
  }
}

TEST(IdxTest, CorruptFilesNameTheFile) {
  TempDir dir;
  std::string p = dir.File("bad.gz");
  WriteGzip(p, IdxBytes(kIdxImagesMagic, {3, 2, 2}, Bytes(12)));
  ExpectError([&] { LoadIdxLabels(p, 10); }, ErrorCode::kInvalidArgument,
              {"idx file '" + p + "'", "bad magic number 0x00000803, expected 0x00000801"});
  WriteGzip(p, IdxBytes(0x00000c03, {3, 2, 2}, Bytes(12)));
  ExpectError([&] { LoadIdxImages(p); }, ErrorCode::kInvalidArgument, {"bad magic number 0x00000c03"});
  WriteGzip(p, IdxBytes(kIdxImagesMagic, {3, 2, 2}, Bytes(11)));
  ExpectError([&] { LoadIdxImages(p); }, ErrorCode::kDataLoss, {p, "truncated: dims [3,2,2] need 12 data bytes, got 11"});
  WriteGzip(p, IdxBytes(kIdxImagesMagic, {3, 2, 2}, Bytes(14)));
  ExpectError([&] { LoadIdxImages(p); }, ErrorCode::kInvalidArgument,
              {p, "trailing garbage: dims [3,2,2] need 12 data bytes, got 14 (2 extra)"});
  WriteGzip(p, IdxBytes(kIdxImagesMagic, {3, 2}, ""));
  ExpectError([&] { LoadIdxImages(p); }, ErrorCode::kDataLoss, {p, "too short for the 3 dims"});
  WriteGzip(p, "\x00\x00");
  ExpectError([&] { LoadIdxImages(p); }, ErrorCode::kDataLoss, {p, "too short for the magic number"});
  ExpectError([&] { LoadIdxImages(dir.File("none.gz")); }, ErrorCode::kNotFound, {dir.File("none.gz")});
  // Empty, but the other dims multiply past int64 (found by tests/fuzz/fuzz_idx:
  // the tensor's element count overflowed, undefined behaviour).
  WriteGzip(p, IdxBytes(kIdxImagesMagic, {4291962306u, 3539927040u, 0}, ""));
  ExpectError([&] { LoadIdxImages(p); }, ErrorCode::kInvalidArgument, {p, "are too large"});
  WriteGzip(p, IdxBytes(kIdxImagesMagic, {0, 28, 28}, ""));
  EXPECT_EQ(LoadIdxImages(p).dims(), (Dims{0, 1, 28, 28}));
}

TEST(IdxTest, FashionMnistLayoutChecks) {
  TempDir dir;
  auto write_set = [&](const std::string& prefix, uint32_t n_images, uint32_t side, uint32_t n_labels) {
    WriteGzip(dir.File(prefix + "-images-idx3-ubyte.gz"),
              IdxBytes(kIdxImagesMagic, {n_images, side, side}, Bytes(size_t{n_images} * side * side)));
    WriteGzip(dir.File(prefix + "-labels-idx1-ubyte.gz"), IdxBytes(kIdxLabelsMagic, {n_labels}, Bytes(n_labels)));
  };
  write_set("train", 5, 28, 5);
  write_set("t10k", 2, 28, 2);
  FashionMnist ok = LoadFashionMnist(dir.path());
  EXPECT_EQ(ok.train.features.ShapeString(), "f32[5,1,28,28]");
  EXPECT_EQ(ok.train.labels.data<int64_t>()[4], 4);
  EXPECT_EQ(ok.test.features.ShapeString(), "f32[2,1,28,28]");

  write_set("t10k", 3, 28, 2);
  ExpectError([&] { LoadFashionMnist(dir.path()); }, ErrorCode::kInvalidArgument,
              {"t10k-images-idx3-ubyte.gz' holds 3 images but '", "t10k-labels-idx1-ubyte.gz' holds 2 labels"});
  write_set("t10k", 2, 27, 2);
  ExpectError([&] { LoadFashionMnist(dir.path()); }, ErrorCode::kInvalidArgument,
              {"t10k-images-idx3-ubyte.gz", "expected 28x28 images, got 27x27"});
  fs::remove(dir.File("train-labels-idx1-ubyte.gz"));
  ExpectError([&] { LoadFashionMnist(dir.path()); }, ErrorCode::kNotFound, {"train-labels-idx1-ubyte.gz"});
}

TEST(IdxTest, LoadsInstalledFashionMnist) {
  if (!fs::exists(std::string(kDefaultFashionMnistDir) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << kDefaultFashionMnistDir << " not installed (Debian package dataset-fashion-mnist)";
  }
  FashionMnist f = LoadFashionMnist();
  EXPECT_EQ(f.train.features.ShapeString(), "f32[60000,1,28,28]");
  EXPECT_EQ(f.train.labels.ShapeString(), "i64[60000,1]");
  EXPECT_EQ(f.test.features.ShapeString(), "f32[10000,1,28,28]");
  EXPECT_EQ(f.test.labels.ShapeString(), "i64[10000,1]");
  // Fashion-MNIST is balanced: 6000 train and 1000 test images per class.
  for (const auto& [part, per_class] : {std::pair{&f.train, 6000}, std::pair{&f.test, 1000}}) {
    std::vector<int> counts(10);
    for (int64_t i = 0; i < part->size(); ++i) counts[part->labels.data<int64_t>()[i]]++;
    for (int c : counts) EXPECT_EQ(c, per_class);
  }
  double sum = 0;
  const float* x = f.train.features.data<float>();
  for (int64_t i = 0; i < f.train.features.numel(); ++i) {
    ASSERT_GE(x[i], 0.0f);
    ASSERT_LE(x[i], 1.0f);
    sum += x[i];
  }
  // Mean pixel of the training set is 0.2860 (72.94 / 255).
  EXPECT_NEAR(sum / f.train.features.numel(), 0.2860, 0.001);
}

}  // namespace
}  // namespace kiln
