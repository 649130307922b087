// External data of ONNX models (framework/onnx/onnx_model.cc): read from a
// file in the model's folder; a location that is absolute, goes through
// "..", or leaves the folder through a symlink is refused naming it, as are
// data past the file's end and external data in a model given as bytes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "framework/executor.h"
#include "framework/onnx/onnx_import.h"
#include "tests/onnx_model_builder.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test::OnnxModelBuilder;

class OnnxExternalDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/kiln_onnx_ext_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(root_ + "/model");
    const float w[4] = {1.5f, -2, 3, 0.25f};
    WriteFileAtomic(root_ + "/model/w.bin", std::string("pad!") + std::string(reinterpret_cast<const char*>(w), 16));
    WriteFileAtomic(root_ + "/outside.bin", std::string(reinterpret_cast<const char*>(w), 16));
  }
  // y = x * w, w [4] from `location` at offset 4 (as w.bin holds it).
  std::string Write(const std::string& location, int64_t offset = 4) {
    OnnxModelBuilder m(14);
    m.Input("x", {4}).External("w", {4}, location);
    auto* kv = m.model().mutable_graph()->mutable_initializer(0)->add_external_data();
    kv->set_key("offset");
    kv->set_value(std::to_string(offset));
    m.Node("Mul", {"x", "w"}, {"y"});
    m.Output("y", {4});
    const std::string path = root_ + "/model/m.onnx";
    m.Write(path);
    return path;
  }
  std::string ImportError(const std::string& path) {
    return test::ErrorOf([&] { ImportOnnxModel(path); });
  }
  std::string root_;
};

TEST_F(OnnxExternalDataTest, ReadsTheFileBesideTheModel) {
  const OnnxImport im = ImportOnnxModel(Write("w.bin"));
  Scope scope;
  Executor().RunProgram(im.startup, scope);
  EXPECT_EQ(test::CompareTensors(scope.GetVar("w")->Get(), test::FloatTensor({4}, {1.5f, -2, 3, 0.25f}), 0, 0), "");
}

TEST_F(OnnxExternalDataTest, PathsOutOfTheFolderAreRefused) {
  EXPECT_NE(ImportError(Write("../outside.bin")).find("initializer 'w': external data location '../outside.bin' "
                                                      "leaves the model's folder"),
            std::string::npos);
  const std::string abs = root_ + "/outside.bin";
  EXPECT_NE(ImportError(Write(abs)).find("external data location '" + abs + "' is an absolute path"),
            std::string::npos);
  fs::create_symlink(root_ + "/outside.bin", root_ + "/model/link.bin");
  EXPECT_NE(ImportError(Write("link.bin")).find("external data location 'link.bin' resolves to " +
                                                fs::canonical(root_ + "/outside.bin").string() +
                                                ", outside the model's folder"),
            std::string::npos);
  EXPECT_NE(ImportError(Write("missing.bin")).find("external data file 'missing.bin' not found"), std::string::npos);
  EXPECT_NE(ImportError(Write("w.bin", 30)).find("external data 'w.bin' has 20 bytes; offset 30 is past its end"),
            std::string::npos);
  EXPECT_NE(ImportError(Write("w.bin", 8)).find("initializer 'w': [4] float needs 16 bytes of raw_data, got 12"),
            std::string::npos);
  // Bytes have no folder.
  const std::string bytes = ReadFile(Write("w.bin"));
  EXPECT_NE(test::ErrorOf([&] { ImportOnnxModelFromBytes(bytes); }).find("needs the model's folder"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln
