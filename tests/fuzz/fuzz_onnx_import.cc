// Fuzzes the ONNX importer (framework/onnx/): any bytes given to
// ImportOnnxModelFromBytes either import or throw kiln::Error; nothing
// crashes or aborts inside the parser, onnx::checker, shape inference, the
// converters or constant folding. External data is looked up in an empty
// folder of the harness's own.
//
// What imports must be whole: every feed and fetch is a declared var, the
// startup program runs and fills every persistable var of the main program,
// and the main program, fed zeros (dims known only at run time as 1), runs
// or throws kiln::Error.
#include <filesystem>

#include "framework/executor.h"
#include "framework/onnx/onnx_import.h"
#include "framework/op_desc.h"
#include "tests/fuzz/fuzz_util.h"

namespace kiln::fuzz {
namespace {

constexpr int64_t kMaxFedElements = 1 << 14;  // larger programs are imported, not run

const std::string& ModelDir() {
  static const std::string dir = [] {
    const std::string d = ScratchDir() + "/model";
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

void CheckImport(const OnnxImport& im) {
  const proto::BlockDesc& block = im.main.blocks(0);
  for (const auto* list : {&im.inputs, &im.outputs}) {
    for (const std::string& v : *list) {
      if (FindVarDesc(block, v) == nullptr) Finding("feed or fetch '" + v + "' is not declared");
    }
  }
  Scope scope;
  try {
    Executor().RunProgram(im.startup, scope);
  } catch (const Error& e) {
    Finding(std::string("the startup program fails: ") + e.what());
  }
  for (const auto& v : block.vars()) {
    if (!v.persistable()) continue;
    const Variable* var = scope.FindVar(v.name());
    if (var == nullptr || !var->Get().initialized()) Finding("persistable '" + v.name() + "' is not filled");
  }
  int64_t fed = 0;
  for (const std::string& name : im.inputs) {
    Dims dims = VarDims(*FindVarDesc(block, name));
    for (int64_t& d : dims) d = d < 0 ? 1 : d;
    fed += Numel(dims);
    if (fed > kMaxFedElements) return;
    Tensor t(FromProto(FindVarDesc(block, name)->dtype()), dims);
    std::memset(t.raw_mutable_data(t.dtype()), 0, t.bytes());
    FeedTensor(block, scope, name, t);
  }
  ExpectOnlyKilnErrors([&] {
    Executor exec;
    auto plan = exec.Prepare(im.main, 0, {im.outputs.begin(), im.outputs.end()});
    exec.Run(*plan, scope);
  });
}

}  // namespace
}  // namespace kiln::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  fuzz::ExpectOnlyKilnErrors([&] {
    const OnnxImport im = ImportOnnxModelFromBytes(bytes, {}, "fuzz.onnx", fuzz::ModelDir());
    fuzz::CheckImport(im);
  });
  return 0;
}
