#include "tests/lowering_test_util.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <regex>
#include <set>

#include "framework/file_util.h"
#include "framework/ir/graph.h"
#include "runtime/runner.h"
#include "tests/golden_util.h"
#include "tests/op_test_util.h"

namespace kiln::test {

jit::CompileOptions LoweringCase::DefaultOptions() {
  jit::CompileOptions o;
  o.isa = HostIsa();
  return o;
}

namespace {

DataType InputDtype(const LoweringCase& c, const std::string& name) {
  const auto it = c.dtypes.find(name);
  return it == c.dtypes.end() ? DataType::kFP32 : it->second;
}

// The step the case's golden is about: the one whose name the case's name
// is or begins with ("dead_ops_not_fired": dead_ops). `step` is a step line
// "12. elementwise_groups: why".
bool UnderTest(const LoweringCase& c, const std::string& step_line) {
  const size_t name_at = step_line.find(". ") + 2;
  const std::string step = step_line.substr(name_at, step_line.find(": ", name_at) - name_at);
  return c.name == step || c.name.rfind(step + "_", 0) == 0;
}

// The lowering trace (LoweringTrace::ToString) as the golden shows it: the
// steps that fired and the step under test, without their numbers, so that
// a new step changes only the goldens of the clusters it fires on. Sets
// *found when the step under test is among the steps.
std::string FiredSteps(const LoweringCase& c, const std::string& trace, bool* found) {
  const std::string not_fired = "   (did not fire)\n";
  std::string out;
  size_t at = 0;
  // Step lines begin with their number; "units:" ends them.
  while (at < trace.size() && std::isdigit(static_cast<unsigned char>(trace[at]))) {
    const size_t line_end = trace.find('\n', at) + 1;
    size_t body_end = line_end;
    while (trace.compare(body_end, 3, "   ") == 0) body_end = trace.find('\n', body_end) + 1;
    const std::string line = trace.substr(at, line_end - at);
    const bool under_test = UnderTest(c, line);
    *found = *found || under_test;
    if (under_test || trace.compare(line_end, body_end - line_end, not_fired) != 0) {
      out += line.substr(line.find(". ") + 2) + trace.substr(line_end, body_end - line_end);
    }
    at = body_end;
  }
  return out + trace.substr(at);
}

}  // namespace

JitSubgraph MakeSubgraph(const LoweringCase& c) {
  JitSubgraph sg;
  sg.block.set_idx(0);
  sg.block.set_parent_idx(-1);
  for (const auto& [name, dims] : c.inputs) {
    proto::VarDesc* v = sg.block.add_vars();
    v->set_name(name);
    v->set_dtype(ToProto(InputDtype(c, name)));
    for (int64_t d : dims) v->add_dims(d);
    sg.inputs.push_back(name);
  }
  for (const auto& op : c.ops) *sg.block.add_ops() = op;
  sg.outputs = c.outputs;
  sg.donatable_inputs = c.donatable;
  return sg;
}

jit::ShapeSignature SignatureOf(const LoweringCase& c) {
  jit::ShapeSignature sig;
  for (const auto& [name, dims] : c.inputs) sig.inputs.push_back({InputDtype(c, name), dims});
  return sig;
}

std::unique_ptr<jit::CompiledObject> LowerCase(const LoweringCase& c) {
  const JitSubgraph sg = MakeSubgraph(c);
  return jit::Lower(JitSubgraphFingerprint(sg), sg, SignatureOf(c), c.options);
}

std::string LoweringGolden(const LoweringCase& c) {
  const JitSubgraph sg = MakeSubgraph(c);
  const auto obj = LowerCase(c);
  std::string out = "# " + c.name + ": lowering golden (regenerate with KILN_UPDATE_GOLDEN=1)\n## cluster\n";
  out += ir::Graph::FromBlock(jit::InferConcreteShapes(sg, SignatureOf(c))).Print();
  bool found = false;
  const std::string steps = FiredSteps(c, obj->lowering, &found);
  EXPECT_TRUE(found) << "case " << c.name << ": its name does not begin with the name of a lowering step";
  out += "## lowering (the steps that fired, and the step under test)\n" + steps;
  // The kernels' scratch (oneDNN's reorders) depends on the CPU: the golden
  // shows the temps' arena alone.
  const std::string listing = obj->Listing();
  std::string buffers = listing.substr(listing.find("# buffers\n") + 10);
  buffers = std::regex_replace(buffers, std::regex("# arena \\d+ bytes planned \\((\\d+) for temps[^)]*\\)"),
                               "# arena $1 bytes planned");
  buffers = std::regex_replace(buffers, std::regex("; kernel scratch up to \\d+ bytes an instruction"), "");
  out += "## buffers\n" + buffers;
  return out;
}

void CheckLoweringGolden(const LoweringCase& c) {
  const std::string path = std::string(KILN_SOURCE_DIR) + "/tests/golden/lowering/" + c.name + ".golden";
  const std::string text = LoweringGolden(c);
  test::ExpectGolden(path, text);
}

std::unique_ptr<jit::CompiledObject> CheckLoweringNumerics(const LoweringCase& c, double atol, double rtol,
                                                           unsigned seed) {
  auto obj = LowerCase(c);
  CheckProgramNumerics(c, *obj, obj->program, atol, rtol, seed);
  return obj;
}

void CheckProgramNumerics(const LoweringCase& c, const jit::CompiledObject& obj, const runtime::Program& program,
                          double atol, double rtol, unsigned seed) {
  std::mt19937 rng(seed);
  std::map<std::string, Tensor> inputs;
  for (const auto& [name, dims] : c.inputs) {
    const auto given = c.given.find(name);
    inputs[name] = given != c.given.end() ? given->second : RandomTensor(dims, InputDtype(c, name), rng, -2.0, 2.0);
  }
  std::unique_ptr<Scope> reference = RunOps(c.ops, inputs, /*use_onednn=*/false);
  const std::vector<Tensor> outs = RunCompiled(obj, program, inputs);
  for (size_t o = 0; o < outs.size(); ++o) {
    const std::string& name = obj.output_names[o];
    const auto own = c.output_atol.find(name);
    EXPECT_EQ(outs[o].dtype(), reference->GetVar(name)->Get().dtype()) << c.name << " output " << name;
    EXPECT_EQ(CompareTensors(outs[o], reference->GetVar(name)->Get(), own != c.output_atol.end() ? own->second : atol,
                             rtol),
              "")
        << c.name << " output " << name << "\n" << obj.Listing();
  }
}

std::vector<Tensor> RunCompiled(const jit::CompiledObject& obj, const std::map<std::string, Tensor>& inputs) {
  return RunCompiled(obj, obj.program, inputs);
}

std::vector<Tensor> RunCompiled(const jit::CompiledObject& obj, const runtime::Program& program,
                                const std::map<std::string, Tensor>& inputs) {
  std::vector<Tensor> bound, outs;
  std::vector<void*> in_ptrs, out_ptrs;
  bound.reserve(obj.input_names.size());
  for (const auto& name : obj.input_names) {
    bound.emplace_back();
    bound.back().CopyFrom(inputs.at(name));
    in_ptrs.push_back(bound.back().raw_data());
  }
  for (size_t o = 0; o < obj.output_names.size(); ++o) {
    Tensor t;
    if (obj.output_alias[o] >= 0) {
      t.CopyFrom(bound[obj.output_alias[o]]);
    } else {
      t = Tensor(obj.output_dtypes[o], obj.output_dims[o]);
      // An element the program does not write shows: NaN, or 0xab bytes.
      if (t.dtype() == DataType::kFP32) {
        float* p = t.mutable_data<float>();
        for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
      } else if (t.numel() > 0) {
        std::memset(t.raw_mutable_data(), 0xab, t.bytes());
      }
    }
    out_ptrs.push_back(t.raw_data());
    outs.push_back(std::move(t));
  }
  runtime::Runner::Run(program, in_ptrs, out_ptrs);
  return outs;
}

LoweringCase ConvBiasAct(const std::string& name, bool bias, const std::string& act, Dims input, Dims filter,
                         int64_t stride, int64_t pad, int64_t groups) {
  LoweringCase c;
  c.name = name;
  const std::vector<int64_t> strides = {stride, stride}, paddings = {pad, pad};
  c.ops = {OpBuilder("conv2d")
               .In("Input", {"x"})
               .In("Filter", {"f"})
               .Out("Output", {"conv"})
               .Attr("strides", strides)
               .Attr("paddings", paddings)
               .Attr("groups", groups)
               .Build()};
  c.inputs = {{"x", input}, {"f", filter}};
  std::string out = "conv";
  if (bias) {
    c.ops.push_back(
        OpBuilder("elementwise_add").In("X", {"conv"}).In("Y", {"b"}).Out("Out", {"sum"}).Attr("axis", int64_t{1}).Build());
    c.inputs.push_back({"b", {filter[0]}});
    out = "sum";
  }
  if (!act.empty()) {
    c.ops.push_back(OpBuilder(act).In("X", {out}).Out("Out", {"act"}).Build());
    out = "act";
  }
  c.outputs = {out};
  return c;
}

LoweringCase ReluMatmulBiasGrad(const std::string& name, int64_t batch) {
  LoweringCase c;
  c.name = name;
  c.ops = {OpBuilder("relu").In("X", {"x"}).Out("Out", {"r"}).Build(),
           OpBuilder("matmul").In("X", {"r"}).In("Y", {"w"}).Out("Out", {"m"}).Build(),
           OpBuilder("elementwise_add").In("X", {"r"}).In("Y", {"b"}).Out("Out", {"s"}).Build(),
           OpBuilder("elementwise_add_grad")
               .In("Y", {"b"})
               .In("Out@GRAD", {"s"})
               .Out("X@GRAD", {"dx"})
               .Out("Y@GRAD", {"db"})
               .Build()};
  c.inputs = {{"x", {batch, 17}}, {"w", {17, 3}}, {"b", {17}}};
  c.outputs = {"m", "dx", "db"};
  c.options.use_onednn = false;
  return c;
}

proto::OpDesc ConvGradOp(const std::string& dconv, int64_t stride, int64_t pad) {
  return OpBuilder("conv2d_grad")
      .In("Input", {"x"})
      .In("Filter", {"f"})
      .In("Output@GRAD", {dconv})
      .Out("Input@GRAD", {"dx"})
      .Out("Filter@GRAD", {"df"})
      .Attr("strides", std::vector<int64_t>{stride, stride})
      .Attr("paddings", std::vector<int64_t>{pad, pad})
      .Attr("groups", int64_t{1})
      .Build();
}

proto::OpDesc BiasAddGradOp() {
  return OpBuilder("elementwise_add_grad")
      .In("Y", {"b"})
      .In("Out@GRAD", {"dsum"})
      .Out("X@GRAD", {"dconv"})
      .Out("Y@GRAD", {"db"})
      .Attr("axis", int64_t{1})
      .Build();
}

LoweringCase GradAndSgd(const std::string& name, int64_t m, int64_t k, int64_t n, bool want_dx) {
  LoweringCase c;
  c.name = name;
  OpBuilder g("matmul_grad");
  g.In("X", {"x"}).In("Y", {"w"}).In("Out@GRAD", {"dy"}).Out("Y@GRAD", {"dw"});
  g.Out("X@GRAD", {want_dx ? "dx" : kEmptyVarName});
  c.ops = {g.Build(), OpBuilder("sgd")
                          .In("Param", {"w"})
                          .In("Grad", {"dw"})
                          .In("LearningRate", {"lr"})
                          .Out("ParamOut", {"w"})
                          .Build()};
  c.inputs = {{"x", {m, k}}, {"w", {k, n}}, {"dy", {m, n}}, {"lr", {1}}};
  c.outputs = {"w"};
  if (want_dx) c.outputs.insert(c.outputs.begin(), "dx");
  return c;
}

bool StepMatched(const jit::CompiledObject& obj, const std::string& step) {
  const size_t at = obj.lowering.find(". " + step + ": ");
  if (at == std::string::npos) return false;
  const size_t line_end = obj.lowering.find('\n', at);
  return obj.lowering.compare(line_end + 1, 11, "   matched ") == 0;
}

}  // namespace kiln::test
