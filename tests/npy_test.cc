#include "framework/data/npy.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

#include "framework/file_util.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test::ExpectError;
using test::TempDir;

std::string Fixture(const std::string& name) { return std::string(KILN_SOURCE_DIR) + "/tests/data/npy/" + name; }

template <typename T>
std::vector<T> Values(const Tensor& t) {
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.numel());
}

// A .npy file with header text `dict` (padded as NumPy does) and raw data.
std::string MakeNpy(const std::string& dict, const std::string& data, int major = 1) {
  size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  for (size_t i = 0; i < prefix - 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string FloatBytes(std::vector<float> v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

TEST(NpyTest, ReadsArraysWrittenByNumpy) {
  Tensor f32 = ReadNpy(Fixture("f32_3x4.npy"));
  EXPECT_EQ(f32.ShapeString(), "f32[3,4]");
  std::vector<float> want;
  for (int i = 0; i < 12; ++i) want.push_back(i / 4.0f - 1.0f);
  EXPECT_EQ(Values<float>(f32), want);

  Tensor i64 = ReadNpy(Fixture("i64_5.npy"));
  EXPECT_EQ(i64.ShapeString(), "i64[5]");
  EXPECT_EQ(Values<int64_t>(i64), (std::vector<int64_t>{-3, 0, 7, int64_t{1} << 40, -(int64_t{1} << 62)}));

  Tensor f64 = ReadNpy(Fixture("f64_2x1x3.npy"));
  EXPECT_EQ(f64.ShapeString(), "f64[2,1,3]");
  EXPECT_EQ(Values<double>(f64), (std::vector<double>{0.1, -0.2, 1e300, -1e-300, 3.0, 0.0}));

  Tensor i32 = ReadNpy(Fixture("i32_2x2.npy"));
  EXPECT_EQ(i32.ShapeString(), "i32[2,2]");
  EXPECT_EQ(Values<int32_t>(i32), (std::vector<int32_t>{1, -2, 2147483647, -2147483647 - 1}));

  Tensor b = ReadNpy(Fixture("bool_4.npy"));
  EXPECT_EQ(b.ShapeString(), "bool[4]");
  EXPECT_EQ(Values<bool>(b), (std::vector<bool>{true, false, false, true}));

  Tensor four_d = ReadNpy(Fixture("f32_10x2x1x2.npy"));
  EXPECT_EQ(four_d.ShapeString(), "f32[10,2,1,2]");
  EXPECT_EQ(four_d.data<float>()[39], 39.0f);
}

TEST(NpyTest, ZeroDimArrayHasEmptyDimsAndOneElement) {
  Tensor t = ReadNpy(Fixture("scalar_f32.npy"));
  EXPECT_TRUE(t.dims().empty());
  EXPECT_EQ(t.numel(), 1);
  EXPECT_EQ(t.data<float>()[0], 2.5f);
}

TEST(NpyTest, EmptyArray) {
  Tensor t = ReadNpy(Fixture("empty_0x3_f32.npy"));
  EXPECT_EQ(t.ShapeString(), "f32[0,3]");
  EXPECT_EQ(t.numel(), 0);
}

TEST(NpyTest, ReadsFormatVersions2And3) {
  for (const char* name : {"f32_2x3_v2.npy", "f32_2x3_v3.npy"}) {
    Tensor t = ReadNpy(Fixture(name));
    EXPECT_EQ(t.ShapeString(), "f32[2,3]") << name;
    EXPECT_EQ(Values<float>(t), (std::vector<float>{0, 1, 2, 3, 4, 5})) << name;
  }
}

// kiln's writer and np.save produce the same bytes (format 1.0, same padding).
TEST(NpyTest, WriterMatchesNpSaveByteForByte) {
  for (const char* name : {"f32_3x4.npy", "i64_5.npy", "f64_2x1x3.npy", "i32_2x2.npy", "bool_4.npy",
                           "scalar_f32.npy", "empty_0x3_f32.npy", "f32_10x2x1x2.npy"}) {
    std::string original = ReadFile(Fixture(name));
    EXPECT_EQ(NpyBytes(ReadNpy(Fixture(name))), original) << name;
  }
}

TEST(NpyTest, RoundTripsEveryRankAndDtype) {
  TempDir dir("kiln_npy_test");
  std::mt19937 rng(3);
  std::vector<Dims> shapes = {{}, {1}, {7}, {3, 5}, {2, 3, 4}, {2, 1, 3, 2}, {1, 2, 1, 2, 3}, {4, 0, 2}};
  for (const Dims& dims : shapes) {
    for (DataType dtype : {DataType::kFP32, DataType::kINT64, DataType::kFP64, DataType::kINT32}) {
      Tensor t(dtype, dims);
      auto* p = static_cast<unsigned char*>(t.raw_mutable_data(dtype));
      for (size_t i = 0; i < t.bytes(); ++i) p[i] = static_cast<unsigned char>(rng());
      if (dtype == DataType::kFP32) {  // keep NaN payloads out of the float compare below
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(rng()) / 7.0f - 1e8f;
      }
      std::string path = dir.File("t.npy");
      WriteNpy(path, t);
      std::string bytes = ReadFile(path);
      EXPECT_EQ((bytes.size() - t.bytes()) % 64, 0u) << "data not 64-byte aligned for " << t.ShapeString();
      Tensor back = ReadNpy(path);
      EXPECT_EQ(back.ShapeString(), t.ShapeString());
      EXPECT_EQ(std::memcmp(back.raw_data(), t.raw_data(), t.bytes()), 0) << t.ShapeString();
    }
  }
}

TEST(NpyTest, HugeHeaderIsWrittenAsVersion2) {
  Tensor t(DataType::kFP32, Dims(30000, 1));
  t.mutable_data<float>()[0] = 4.0f;
  std::string bytes = NpyBytes(t);
  EXPECT_EQ(bytes[6], 2);
  Tensor back = ParseNpy(bytes, "big.npy");
  EXPECT_EQ(back.rank(), 30000u);
  EXPECT_EQ(back.data<float>()[0], 4.0f);
}

TEST(NpyTest, BadMagic) {
  ExpectError([] { ParseNpy("PK\x03\x04 not an npy file", "x.npy"); }, ErrorCode::kInvalidArgument,
              {"npy file 'x.npy'", "bad magic", "PK\\x03\\x04"});
  ExpectError([] { ParseNpy("", "empty.npy"); }, ErrorCode::kInvalidArgument, {"'empty.npy'", "bad magic"});
}

TEST(NpyTest, UnsupportedVersion) {
  std::string bytes = MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", FloatBytes({1}));
  bytes[6] = 4;
  ExpectError([&] { ParseNpy(bytes, "v.npy"); }, ErrorCode::kInvalidArgument,
              {"'v.npy'", "unsupported format version 4.0"});
  bytes[6] = 1;
  bytes[7] = 1;
  ExpectError([&] { ParseNpy(bytes, "v.npy"); }, ErrorCode::kInvalidArgument, {"unsupported format version 1.1"});
}

TEST(NpyTest, MalformedHeader) {
  struct Case {
    std::string dict;
    std::string message;
  };
  std::vector<Case> cases = {
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (1,), }", "malformed header: expected ':'"},
      {"'descr': '<f4'", "malformed header: expected '{'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), ", "malformed header: expected a quoted key"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (1,), }", "malformed header"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", "negative dimension"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } x", "unexpected text after the closing '}'"},
      {"{'descr': '<f4', 'fortran_order': false, 'shape': (1,), }", "expected a string, True, False or a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, }", "no 'shape' key"},
      {"{'descr': '<f4', 'shape': (1,), }", "no 'fortran_order' key"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 'x', }", "unexpected key 'extra'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", "duplicate key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [1], }", "'shape' must be a tuple of ints"},
      {"{'descr': '<f4', 'fortran_order': 'no', 'shape': (1,), }", "'fortran_order' must be True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1 2), }", "expected ',' or ')' in tuple"},
  };
  for (const Case& c : cases) {
    ExpectError([&] { ParseNpy(MakeNpy(c.dict, FloatBytes({1})), "h.npy"); }, ErrorCode::kInvalidArgument,
                {"npy file 'h.npy'", c.message});
  }
}

TEST(NpyTest, AcceptsHeaderVariantsOtherWritersProduce) {
  // Double quotes, keys in another order, no trailing comma, Python 2 long
  // suffix, a tuple without spaces.
  Tensor t = ParseNpy(MakeNpy("{\"shape\":(2L,1), \"fortran_order\":False, \"descr\":\"<f4\"}", FloatBytes({1, 2})),
                      "ok.npy");
  EXPECT_EQ(t.ShapeString(), "f32[2,1]");
  EXPECT_EQ(Values<float>(t), (std::vector<float>{1, 2}));
}

TEST(NpyTest, FortranOrderIsRejected) {
  ExpectError([] { ReadNpy(Fixture("fortran_f32_2x3.npy")); }, ErrorCode::kInvalidArgument,
              {"fortran_f32_2x3.npy", "fortran_order True is not supported"});
}

TEST(NpyTest, UnsupportedDtypeIsNamed) {
  ExpectError([] { ReadNpy(Fixture("big_endian_f4.npy")); }, ErrorCode::kInvalidArgument,
              {"big_endian_f4.npy", "unsupported dtype '>f4'", "supported: <f4, <f8, <i8, <i4, |b1"});
  ExpectError([] { ReadNpy(Fixture("u8.npy")); }, ErrorCode::kInvalidArgument, {"u8.npy", "unsupported dtype '|u1'"});
  ExpectError([] { ReadNpy(Fixture("structured.npy")); }, ErrorCode::kInvalidArgument,
              {"structured.npy", "unsupported dtype [('a', '<f4'), ('b', '<i4')]", "structured dtypes"});
}

TEST(NpyTest, TruncatedData) {
  std::string bytes = ReadFile(Fixture("f32_3x4.npy"));
  bytes.resize(bytes.size() - 4);
  ExpectError([&] { ParseNpy(bytes, "t.npy"); }, ErrorCode::kDataLoss,
              {"npy file 't.npy'", "truncated data", "needs 48 bytes, got 44"});
}

TEST(NpyTest, TruncatedHeader) {
  std::string bytes = ReadFile(Fixture("f32_3x4.npy"));
  ExpectError([&] { ParseNpy(bytes.substr(0, 40), "t.npy"); }, ErrorCode::kDataLoss,
              {"'t.npy'", "truncated header: header length is 118 bytes, but only 30 follow"});
  ExpectError([&] { ParseNpy(bytes.substr(0, 9), "t.npy"); }, ErrorCode::kDataLoss, {"truncated header"});
}

TEST(NpyTest, TrailingGarbage) {
  std::string bytes = ReadFile(Fixture("f32_3x4.npy")) + "abc";
  ExpectError([&] { ParseNpy(bytes, "g.npy"); }, ErrorCode::kInvalidArgument,
              {"npy file 'g.npy'", "trailing garbage", "needs 48 bytes, got 51 (3 extra)"});
}

// An empty array whose other dims multiply past int64 (found by
// tests/fuzz/fuzz_npy: the tensor's element count overflowed, undefined
// behaviour) is too large, as NumPy says; the dims alone are not.
TEST(NpyTest, AnEmptyArrayWhoseOtherDimsOverflowIsTooLarge) {
  const std::string big =
      MakeNpy("{'descr': '|b1', 'fortran_order': False, 'shape': (5320252095955959, 2522, 0, 2), }", "");
  ExpectError([&] { ParseNpy(big, "big.npy"); }, ErrorCode::kInvalidArgument,
              {"npy file 'big.npy'", "shape [5320252095955959,2522,0,2] is too large"});
  const Tensor t = ParseNpy(MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 0, 3), }", ""), "e");
  EXPECT_EQ(t.dims(), (Dims{4294967296, 0, 3}));
  EXPECT_EQ(t.numel(), 0);
}

TEST(NpyTest, BoolBytesMustBeZeroOrOne) {
  std::string bytes = MakeNpy("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\1\0\2", 3));
  ExpectError([&] { ParseNpy(bytes, "b.npy"); }, ErrorCode::kInvalidArgument,
              {"'b.npy'", "bool element 2 has byte value 2"});
}

TEST(NpyTest, MissingFileIsNotFound) {
  ExpectError([] { ReadNpy("/nonexistent/dir/x.npy"); }, ErrorCode::kNotFound, {"/nonexistent/dir/x.npy"});
}

TEST(NpyTest, FailedWriteLeavesNoFile) {
  TempDir dir("kiln_npy_test");
  Tensor t(DataType::kFP32, {2});
  t.mutable_data<float>()[0] = 1;
  t.mutable_data<float>()[1] = 2;

  std::string missing_dir_path = dir.File("no_such_dir/out.npy");
  ExpectError([&] { WriteNpy(missing_dir_path, t); }, ErrorCode::kInvalidArgument, {missing_dir_path});
  EXPECT_TRUE(dir.Entries().empty());

  // A tensor without data fails before anything is written, and an existing
  // file at the path is left as it was.
  std::string path = dir.File("out.npy");
  WriteNpy(path, t);
  std::string before = ReadFile(path);
  Tensor no_data(DataType::kFP32, {3});
  ExpectError([&] { WriteNpy(path, no_data); }, ErrorCode::kInvalidArgument, {"f32[3]", "holds no data"});
  EXPECT_EQ(ReadFile(path), before);
  EXPECT_EQ(dir.Entries(), std::vector<std::string>{"out.npy"});
}

}  // namespace
}  // namespace kiln
