// The JIT against the reference kernels, op by op: every op the lowering turns
// into generated code (elementwise ops and their grads, optimizers) at sizes
// around the vector width and broadcast shapes, on both ISA paths; long fused
// chains; framework ops inside a cluster; a cluster that cannot be compiled.
//
// Each case is a small list of ops with FP32 inputs. It runs once through the
// reference kernels (the oracle) and once per ISA through jit::Lower and the
// runtime::Runner, the way jit_launch runs a cluster, and every requested
// output must agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "compiler/codegen/ew_codegen.h"
#include "compiler/compile_cache.h"
#include "compiler/lower.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "runtime/runner.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::CompareTensors;

const std::vector<int64_t> kSizes = {1, 15, 16, 17, 1000, 4099};

struct Tol {
  double atol = 1e-6;
  double rtol = 1e-5;
};
// Float arithmetic with at most a few roundings apart from the reference.
constexpr Tol kExact{1e-6, 1e-5};
// exp, tanh, sigmoid, erf are approximations in generated code.
constexpr Tol kTranscendental{2e-6, 2e-5};

// Tolerance of a sum of `count` terms of magnitude up to `term`: the generated
// code sums in float (vector lanes, then threads), the reference in double.
Tol SumTol(int64_t count, double term) {
  if (count <= 1) return kExact;
  return Tol{2e-7 * term * std::sqrt(static_cast<double>(count)), count >= 1000 ? 1e-4 : 1e-5};
}

// One cluster: ops in execution order, FP32 inputs by var name, the outputs
// to compare (and per-output tolerances where they differ from `tol`).
struct Cluster {
  std::vector<proto::OpDesc> ops;
  std::map<std::string, Tensor> inputs;
  std::vector<std::string> outputs;
  Tol tol = kExact;
  std::map<std::string, Tol> output_tol;
};

// What the cluster must compile to; -1 = not checked.
struct KernelCount {
  int generated = -1;  // instructions running a generated (ew_) kernel
  int framework = -1;  // instructions running a framework op's kernel
};
constexpr KernelCount kOneGeneratedKernel{1, 0};

bool IsGenerated(const runtime::Instruction& ins) { return ins.kernel->name().rfind("ew_", 0) == 0; }

std::vector<Isa> TestedIsas() {
  std::vector<Isa> isas;
  if (IsaSupported(Isa::kAvx512)) isas.push_back(Isa::kAvx512);
  if (IsaSupported(Isa::kAvx2)) isas.push_back(Isa::kAvx2);
  return isas;
}

Tensor Uniform(const Dims& dims, std::mt19937& rng, double lo = -3.0, double hi = 3.0) {
  return test::RandomTensor(dims, DataType::kFP32, rng, lo, hi);
}

// Values with |v| in [lo, hi] and a random sign.
Tensor AwayFromZero(const Dims& dims, std::mt19937& rng, double lo, double hi) {
  Tensor t = Uniform(dims, rng, lo, hi);
  std::bernoulli_distribution negative(0.5);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (negative(rng)) p[i] = -p[i];
  }
  return t;
}

Tensor Scalar(float v) { return test::FloatTensor({1}, {v}); }

Tensor Copy(const Tensor& t) {
  Tensor c;
  c.CopyFrom(t);
  return c;
}

// The JitSubgraph build_jit_pass would make of `c`: every var with the dims
// and dtype the reference run gave it; inputs are the vars read before any op
// of the cluster writes them (in order of first read).
JitSubgraph MakeSubgraph(const Cluster& c, const Scope& reference) {
  JitSubgraph sg;
  sg.block.set_idx(0);
  sg.block.set_parent_idx(-1);
  std::set<std::string> declared, written;
  auto declare = [&](const std::string& name) {
    if (name == kEmptyVarName || !declared.insert(name).second) return;
    const Variable* var = reference.FindVar(name);
    KILN_CHECK(var != nullptr && var->Get().initialized(), "reference run did not produce ", name);
    proto::VarDesc* v = sg.block.add_vars();
    v->set_name(name);
    v->set_dtype(ToProto(var->Get().dtype()));
    for (int64_t d : var->Get().dims()) v->add_dims(d);
  };
  for (const proto::OpDesc& op : c.ops) {
    *sg.block.add_ops() = op;
    for (const std::string& a : AllInputArgs(op)) {
      if (a == kEmptyVarName) continue;
      declare(a);
      if (!written.count(a) &&
          std::find(sg.inputs.begin(), sg.inputs.end(), a) == sg.inputs.end()) {
        sg.inputs.push_back(a);
      }
    }
    for (const std::string& a : AllOutputArgs(op)) {
      if (a == kEmptyVarName) continue;
      declare(a);
      written.insert(a);
    }
  }
  sg.outputs = c.outputs;
  return sg;
}

jit::ShapeSignature SignatureOf(const JitSubgraph& sg, const std::map<std::string, Tensor>& inputs) {
  jit::ShapeSignature sig;
  for (const std::string& name : sg.inputs) {
    const Tensor& t = inputs.at(name);
    sig.inputs.push_back({t.dtype(), t.dims()});
  }
  return sig;
}

jit::CompileOptions OptionsFor(Isa isa) {
  jit::CompileOptions o;
  o.isa = isa;
  o.use_onednn = false;
  o.fuse_elementwise = true;
  o.reuse_buffers = true;
  return o;
}

struct JitRun {
  std::unique_ptr<jit::CompiledObject> obj;
  std::vector<Tensor> outputs;
};

// Compiles and runs `sg` the way jit_launch does: inputs bound zero-copy,
// fresh output tensors (filled with NaN, so an element the program forgets
// to write shows), an in-place output bound to a copy of its input. Checks
// that no input that is not also an output was written.
JitRun CompileAndRun(const JitSubgraph& sg, const std::map<std::string, Tensor>& inputs, Isa isa) {
  JitRun run;
  run.obj = jit::Lower(JitSubgraphFingerprint(sg), sg, SignatureOf(sg, inputs), OptionsFor(isa));
  const jit::CompiledObject& obj = *run.obj;
  std::vector<Tensor> bound_inputs;
  std::vector<void*> in_ptrs, out_ptrs;
  for (const std::string& name : obj.input_names) {
    bound_inputs.push_back(Copy(inputs.at(name)));
    in_ptrs.push_back(bound_inputs.back().raw_data());
  }
  for (size_t o = 0; o < obj.output_names.size(); ++o) {
    Tensor t;
    if (obj.output_alias[o] >= 0) {
      t = Copy(bound_inputs[static_cast<size_t>(obj.output_alias[o])]);
      EXPECT_EQ(t.dims(), obj.output_dims[o]) << obj.output_names[o];
    } else {
      t = Tensor(obj.output_dtypes[o], obj.output_dims[o]);
      float* p = t.mutable_data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
    }
    out_ptrs.push_back(t.raw_data());
    run.outputs.push_back(std::move(t));
  }
  runtime::Runner::Run(obj.program, in_ptrs, out_ptrs);
  for (size_t i = 0; i < obj.input_names.size(); ++i) {
    const Tensor& original = inputs.at(obj.input_names[i]);
    EXPECT_EQ(std::memcmp(bound_inputs[i].raw_data(), original.raw_data(), original.bytes()), 0)
        << "input " << obj.input_names[i] << " was written";
  }
  return run;
}

std::string CountKernels(const jit::CompiledObject& obj, int* generated, int* framework) {
  *generated = *framework = 0;
  for (const runtime::Instruction& ins : obj.program.instructions) ++*(IsGenerated(ins) ? generated : framework);
  return obj.Listing();
}

// Runs `c` through the reference kernels and through the JIT on each ISA and
// compares every output.
void CheckCluster(const std::string& what, const Cluster& c, KernelCount expect = {}) {
  SCOPED_TRACE(what);
  std::unique_ptr<Scope> reference = test::RunOps(c.ops, c.inputs, /*use_onednn=*/false);
  const JitSubgraph sg = MakeSubgraph(c, *reference);
  const std::vector<Isa> isas = TestedIsas();
  ASSERT_FALSE(isas.empty()) << "this CPU has neither AVX-512 nor AVX2+FMA";
  for (Isa isa : isas) {
    SCOPED_TRACE(IsaName(isa));
    JitRun run;
    try {
      run = CompileAndRun(sg, c.inputs, isa);
    } catch (const Error& e) {
      ADD_FAILURE() << "JIT failed: " << e.what();
      continue;
    }
    ASSERT_EQ(run.obj->output_names, c.outputs);
    for (size_t o = 0; o < c.outputs.size(); ++o) {
      const std::string& name = c.outputs[o];
      const auto it = c.output_tol.find(name);
      const Tol tol = it == c.output_tol.end() ? c.tol : it->second;
      const std::string diff = CompareTensors(run.outputs[o], reference->GetVar(name)->Get(), tol.atol, tol.rtol);
      EXPECT_EQ(diff, "") << "output " << name << "\n" << run.obj->Listing();
    }
    int generated = 0, framework = 0;
    const std::string listing = CountKernels(*run.obj, &generated, &framework);
    if (expect.generated >= 0) {
      EXPECT_EQ(generated, expect.generated) << listing;
    }
    if (expect.framework >= 0) {
      EXPECT_EQ(framework, expect.framework) << listing;
    }
  }
}

std::string SizeName(int64_t n) { return "n=" + std::to_string(n); }

// ---- binary elementwise ops -----------------------------------------------------------

struct BinaryShape {
  std::string name;
  Dims x, y;
  int64_t axis;
};

std::vector<BinaryShape> BinaryShapes(int64_t n) {
  return {{"X[n] Y[n]", {n}, {n}, -1},
          {"X[n] Y[1]", {n}, {1}, -1},
          {"X[3,n] Y[n]", {3, n}, {n}, -1},
          {"X[2,5,n] Y[5] axis 1", {2, 5, n}, {5}, 1},
          {"X[n,7] Y[n,1]", {n, 7}, {n, 1}, -1}};
}

const std::vector<std::string> kBinaryOps = {"elementwise_add", "elementwise_sub", "elementwise_mul",
                                             "elementwise_div"};

proto::OpDesc BinaryOp(const std::string& type, int64_t axis) {
  return OpBuilder(type).In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Attr("axis", axis).Build();
}

// The grad op the registry's grad maker makes for `fwd`, with the input
// grads not in `keep` dropped (@EMPTY@).
proto::OpDesc GradOf(const proto::OpDesc& fwd, const std::set<std::string>& keep) {
  const std::vector<proto::OpDesc> grads = OpRegistry::Global().Get(fwd.type()).grad_maker(fwd);
  EXPECT_EQ(grads.size(), 1u) << fwd.type();
  proto::OpDesc g = grads.at(0);
  for (auto& slot : *g.mutable_outputs()) {
    for (auto& arg : *slot.mutable_args()) {
      if (!keep.count(arg)) arg = kEmptyVarName;
    }
  }
  return g;
}

// X, Y (away from 0 for div) and Out@GRAD for a binary op.
std::map<std::string, Tensor> BinaryInputs(const std::string& type, const BinaryShape& s, std::mt19937& rng) {
  std::map<std::string, Tensor> in;
  in["x"] = Uniform(s.x, rng);
  in["y"] = type == "elementwise_div" ? AwayFromZero(s.y, rng, 0.5, 3.0) : Uniform(s.y, rng);
  in[GradVarName("out")] = Uniform(s.x, rng);
  return in;
}

TEST(JitOpsTest, BinaryForward) {
  std::mt19937 rng(1);
  for (const std::string& type : kBinaryOps) {
    for (int64_t n : kSizes) {
      for (const BinaryShape& s : BinaryShapes(n)) {
        Cluster c;
        c.ops = {BinaryOp(type, s.axis)};
        c.inputs = BinaryInputs(type, s, rng);
        c.outputs = {"out"};
        CheckCluster(type + " " + s.name + " " + SizeName(n), c, kOneGeneratedKernel);
      }
    }
  }
}

TEST(JitOpsTest, BinaryGradBothOutputs) {
  std::mt19937 rng(2);
  for (const std::string& type : kBinaryOps) {
    for (int64_t n : kSizes) {
      for (const BinaryShape& s : BinaryShapes(n)) {
        Cluster c;
        c.ops = {GradOf(BinaryOp(type, s.axis), {GradVarName("x"), GradVarName("y")})};
        c.inputs = BinaryInputs(type, s, rng);
        c.outputs = {GradVarName("x"), GradVarName("y")};
        // Y@GRAD sums Numel(X)/Numel(Y) terms: dout for add/sub, dout*x for
        // mul, dout*x/y^2 (|y| >= 0.5) for div.
        const double term = type == "elementwise_div" ? 36.0 : type == "elementwise_mul" ? 9.0 : 3.0;
        c.output_tol[GradVarName("y")] = SumTol(Numel(s.x) / Numel(s.y), term);
        CheckCluster(type + "_grad " + s.name + " " + SizeName(n), c, kOneGeneratedKernel);
      }
    }
  }
}

TEST(JitOpsTest, BinaryGradOneOutput) {
  std::mt19937 rng(3);
  for (const std::string& type : kBinaryOps) {
    for (const BinaryShape& s : BinaryShapes(17)) {
      for (const char* wrt : {"x", "y"}) {
        Cluster c;
        c.ops = {GradOf(BinaryOp(type, s.axis), {GradVarName(wrt)})};
        c.inputs = BinaryInputs(type, s, rng);
        c.outputs = {GradVarName(wrt)};
        const double term = type == "elementwise_div" ? 36.0 : type == "elementwise_mul" ? 9.0 : 3.0;
        c.output_tol[GradVarName("y")] = SumTol(Numel(s.x) / Numel(s.y), term);
        CheckCluster(type + "_grad " + s.name + " only " + GradVarName(wrt), c, kOneGeneratedKernel);
      }
    }
  }
}

// ---- unary ops ------------------------------------------------------------------------

struct UnaryCase {
  std::string name;
  proto::OpDesc op;  // forward, X=x Out=out
  double lo, hi;     // range of X
  Tol tol;
};

std::vector<UnaryCase> UnaryCases() {
  auto op = [](const std::string& type) { return OpBuilder(type).In("X", {"x"}).Out("Out", {"out"}); };
  return {
      {"relu", op("relu").Build(), -3, 3, kExact},
      {"tanh", op("tanh").Build(), -3, 3, kTranscendental},
      {"sigmoid", op("sigmoid").Build(), -3, 3, kTranscendental},
      {"exp", op("exp").Build(), -10, 10, kTranscendental},
      {"gelu", op("gelu").Attr("approximate", false).Build(), -3, 3, kTranscendental},
      {"gelu approximate", op("gelu").Attr("approximate", true).Build(), -3, 3, kTranscendental},
      {"scale bias after", op("scale").Attr("scale", 1.75f).Attr("bias", -0.5f).Attr("bias_after_scale", true).Build(),
       -3, 3, kExact},
      {"scale bias before",
       op("scale").Attr("scale", -2.5f).Attr("bias", 0.25f).Attr("bias_after_scale", false).Build(), -3, 3, kExact},
      // Bounds inside the range of X: both clamps and the pass-through band
      // are hit (NaN, infinities and X exactly at a bound: jit_clip_softmax_test).
      {"clip", op("clip").Attr("min", -1.25f).Attr("max", 2.0f).Build(), -3, 3, kExact},
  };
}

TEST(JitOpsTest, UnaryForward) {
  std::mt19937 rng(4);
  for (const UnaryCase& u : UnaryCases()) {
    for (int64_t n : kSizes) {
      Cluster c;
      c.ops = {u.op};
      c.inputs["x"] = Uniform({n}, rng, u.lo, u.hi);
      c.outputs = {"out"};
      c.tol = u.tol;
      CheckCluster(u.name + " " + SizeName(n), c, kOneGeneratedKernel);
    }
  }
}

TEST(JitOpsTest, UnaryGrad) {
  std::mt19937 rng(5);
  for (const UnaryCase& u : UnaryCases()) {
    for (int64_t n : kSizes) {
      Cluster c;
      c.ops = {GradOf(u.op, {GradVarName("x")})};
      c.inputs["x"] = Uniform({n}, rng, u.lo, u.hi);
      // The grads read Out (X for gelu, nothing for scale): relu's Out is kept
      // away from 0, where its grad jumps; the others get Out of the forward op.
      if (u.op.type() == "relu") {
        c.inputs["out"] = AwayFromZero({n}, rng, 0.1, 3.0);
      } else {
        c.inputs["out"] = Copy(test::RunOp(u.op, {{"x", c.inputs["x"]}})->GetVar("out")->Get());
      }
      c.inputs[GradVarName("out")] = Uniform({n}, rng);
      c.outputs = {GradVarName("x")};
      c.tol = u.tol;
      CheckCluster(u.name + "_grad " + SizeName(n), c, kOneGeneratedKernel);
    }
  }
}

// ---- optimizers -----------------------------------------------------------------------

TEST(JitOpsTest, Sgd) {
  std::mt19937 rng(6);
  for (float l2 : {0.f, 0.05f}) {
    for (int64_t n : kSizes) {
      Cluster c;
      c.ops = {OpBuilder("sgd")
                   .In("Param", {"p"})
                   .In("Grad", {"g"})
                   .In("LearningRate", {"lr"})
                   .Out("ParamOut", {"p"})
                   .Attr("regularization_coeff", l2)
                   .Build()};
      c.inputs = {{"p", Uniform({n}, rng)}, {"g", Uniform({n}, rng)}, {"lr", Scalar(0.01f)}};
      c.outputs = {"p"};
      CheckCluster("sgd l2=" + std::to_string(l2) + " " + SizeName(n), c, kOneGeneratedKernel);
    }
  }
}

TEST(JitOpsTest, Momentum) {
  std::mt19937 rng(7);
  for (bool nesterov : {false, true}) {
    for (int64_t n : kSizes) {
      const float l2 = nesterov ? 0.f : 0.05f;  // L2 decay on one of the two forms
      Cluster c;
      c.ops = {OpBuilder("momentum")
                   .In("Param", {"p"})
                   .In("Grad", {"g"})
                   .In("Velocity", {"v"})
                   .In("LearningRate", {"lr"})
                   .Out("ParamOut", {"p"})
                   .Out("VelocityOut", {"v"})
                   .Attr("mu", 0.9f)
                   .Attr("use_nesterov", nesterov)
                   .Attr("regularization_coeff", l2)
                   .Build()};
      c.inputs = {{"p", Uniform({n}, rng)}, {"g", Uniform({n}, rng)}, {"v", Uniform({n}, rng)},
                  {"lr", Scalar(0.01f)}};
      c.outputs = {"p", "v"};
      CheckCluster(std::string("momentum nesterov=") + (nesterov ? "true " : "false ") + SizeName(n), c,
                   kOneGeneratedKernel);
    }
  }
}

// adam, adam with L2 decay (regularization_coeff) and adamw's decoupled
// decay (coeff): each fused into the generated update kernel.
TEST(JitOpsTest, Adam) {
  std::mt19937 rng(8);
  struct Form {
    std::string type, attr;
    float value;
  };
  for (const Form& form : {Form{"adam", "", 0.f}, Form{"adam", "regularization_coeff", 0.05f},
                           Form{"adamw", "coeff", 0.1f}, Form{"adamw", "coeff", 0.f}}) {
    for (int64_t n : kSizes) {
      OpBuilder op(form.type);
      op.In("Param", {"p"})
          .In("Grad", {"g"})
          .In("Moment1", {"m1"})
          .In("Moment2", {"m2"})
          .In("LearningRate", {"lr"})
          .In("Beta1Pow", {"b1p"})
          .In("Beta2Pow", {"b2p"})
          .Out("ParamOut", {"p"})
          .Out("Moment1Out", {"m1"})
          .Out("Moment2Out", {"m2"})
          .Out("Beta1PowOut", {"b1p"})
          .Out("Beta2PowOut", {"b2p"});
      if (!form.attr.empty()) op.Attr(form.attr, form.value);
      Cluster c;
      c.ops = {op.Build()};
      c.inputs = {{"p", Uniform({n}, rng)},
                  {"g", Uniform({n}, rng)},
                  {"m1", Uniform({n}, rng, -1, 1)},
                  {"m2", Uniform({n}, rng, 0, 3)},
                  {"lr", Scalar(0.01f)},
                  {"b1p", Scalar(0.9f * 0.9f * 0.9f)},
                  {"b2p", Scalar(0.999f * 0.999f * 0.999f)}};
      c.outputs = {"p", "m1", "m2", "b1p", "b2p"};
      // The parameter-sized update and the [1]-sized beta-power update are two
      // iteration spaces, one space when the parameter has one element.
      CheckCluster(form.type + " " + form.attr + "=" + std::to_string(form.value) + " " + SizeName(n), c,
                   KernelCount{n == 1 ? 1 : 2, 0});
    }
  }
}

proto::OpDesc AdamOp(const std::string& p, const std::string& g, const std::string& m1, const std::string& m2,
                     const std::string& b1p, const std::string& b2p) {
  return OpBuilder("adam")
      .In("Param", {p})
      .In("Grad", {g})
      .In("Moment1", {m1})
      .In("Moment2", {m2})
      .In("LearningRate", {"lr"})
      .In("Beta1Pow", {b1p})
      .In("Beta2Pow", {b2p})
      .Out("ParamOut", {p})
      .Out("Moment1Out", {m1})
      .Out("Moment2Out", {m2})
      .Out("Beta1PowOut", {b1p})
      .Out("Beta2PowOut", {b2p})
      .Build();
}

// Two adam updates of parameters of different sizes: one kernel per
// parameter, and the beta powers of both share one [1]-sized kernel.
TEST(JitOpsTest, TwoAdamsShareOneBetaPowerKernel) {
  std::mt19937 rng(14);
  Cluster c;
  c.ops = {AdamOp("p", "g", "m1", "m2", "b1p", "b2p"), AdamOp("q", "h", "n1", "n2", "c1p", "c2p")};
  c.inputs = {{"p", Uniform({1000}, rng)},     {"g", Uniform({1000}, rng)},
              {"m1", Uniform({1000}, rng)},    {"m2", Uniform({1000}, rng, 0, 3)},
              {"q", Uniform({17, 3}, rng)},    {"h", Uniform({17, 3}, rng)},
              {"n1", Uniform({17, 3}, rng)},   {"n2", Uniform({17, 3}, rng, 0, 3)},
              {"lr", Scalar(0.01f)},           {"b1p", Scalar(0.9f)},
              {"b2p", Scalar(0.999f)},         {"c1p", Scalar(0.9f * 0.9f)},
              {"c2p", Scalar(0.999f * 0.999f)}};
  c.outputs = {"p", "m1", "m2", "b1p", "b2p", "q", "n1", "n2", "c1p", "c2p"};
  CheckCluster("two adams", c, KernelCount{3, 0});
}

// An update op of `type` over p, g (and its state) with clipping: GradScale
// reads s when `scaled`, and g is clamped to [lo, hi] when lo < hi.
proto::OpDesc ClippedUpdate(const std::string& type, const std::string& p, const std::string& g, bool scaled,
                            float lo, float hi) {
  OpBuilder op(type);
  op.In("Param", {p}).In("Grad", {g}).In("LearningRate", {"lr"}).Out("ParamOut", {p});
  if (type == "momentum") op.In("Velocity", {p + ".v"}).Out("VelocityOut", {p + ".v"});
  if (type == "adam" || type == "adamw") {
    op.In("Moment1", {p + ".m1"}).In("Moment2", {p + ".m2"}).In("Beta1Pow", {p + ".b1p"}).In("Beta2Pow", {p + ".b2p"});
    op.Out("Moment1Out", {p + ".m1"}).Out("Moment2Out", {p + ".m2"});
    op.Out("Beta1PowOut", {p + ".b1p"}).Out("Beta2PowOut", {p + ".b2p"});
  }
  if (scaled) op.In("GradScale", {"s"});
  if (lo < hi) op.Attr("grad_clip_min", lo).Attr("grad_clip_max", hi);
  return op.Build();
}

// The state of ClippedUpdate's parameter p of dims `dims` (outputs to compare too).
void AddUpdateState(Cluster& c, const std::string& type, const std::string& p, const Dims& dims, std::mt19937& rng) {
  c.inputs[p] = Uniform(dims, rng);
  c.outputs.push_back(p);
  std::vector<std::string> state;
  if (type == "momentum") state = {".v"};
  if (type == "adam" || type == "adamw") state = {".m1", ".m2", ".b1p", ".b2p"};
  for (const std::string& suffix : state) {
    const bool pow = suffix == ".b1p" || suffix == ".b2p";
    c.inputs[p + suffix] = pow ? Scalar(suffix == ".b1p" ? 0.729f : 0.997f) : Uniform(dims, rng, 0, 1);
    c.outputs.push_back(p + suffix);
  }
}

// ClipGradByGlobalNorm's factor (GradScale, a [1] read) and ClipGradByValue's
// clamp inside every generated update, with L2 decay after them on sgd: still
// one generated kernel per iteration space.
TEST(JitOpsTest, UpdatesWithGradClip) {
  std::mt19937 rng(15);
  for (const std::string type : {"sgd", "momentum", "adam", "adamw"}) {
    for (int form = 0; form < 3; ++form) {  // scale only, clamp only, both
      for (int64_t n : kSizes) {
        const bool scaled = form != 1;
        const float lo = form == 0 ? 0.f : -0.7f, hi = form == 0 ? 0.f : 0.4f;
        Cluster c;
        c.ops = {ClippedUpdate(type, "p", "g", scaled, lo, hi)};
        if (type == "sgd" && form == 2) SetAttr(&c.ops[0], "regularization_coeff", 0.05f);
        AddUpdateState(c, type, "p", {n}, rng);
        c.inputs["g"] = Uniform({n}, rng);
        c.inputs["lr"] = Scalar(0.01f);
        if (scaled) c.inputs["s"] = Scalar(0.3f);
        const bool adam = type == "adam" || type == "adamw";
        CheckCluster(type + " clip form " + std::to_string(form) + " " + SizeName(n), c,
                     KernelCount{adam && n != 1 ? 2 : 1, 0});
      }
    }
  }
}

// clip_by_global_norm in the cluster (its framework kernel) and the updates
// of two parameters of different shapes reading its Scale in generated code.
TEST(JitOpsTest, GlobalNormClipBeforeGeneratedUpdates) {
  std::mt19937 rng(16);
  for (float clip : {0.5f, 1e4f}) {  // clipping active, and not
    Cluster c;
    c.ops = {OpBuilder("clip_by_global_norm").In("X", {"g", "h"}).Out("Scale", {"s"}).Attr("clip_norm", clip).Build(),
             ClippedUpdate("sgd", "p", "g", true, 0, 0), ClippedUpdate("adamw", "q", "h", true, 0, 0)};
    AddUpdateState(c, "sgd", "p", {4099}, rng);
    AddUpdateState(c, "adamw", "q", {17, 3}, rng);
    c.inputs["g"] = Uniform({4099}, rng);
    c.inputs["h"] = Uniform({17, 3}, rng);
    c.inputs["lr"] = Scalar(0.01f);
    c.outputs.push_back("s");
    // sgd's, adamw's and the beta powers' kernels generated; the norm a framework kernel.
    CheckCluster("global norm clip " + std::to_string(clip), c, KernelCount{3, 1});
  }
}

// ---- long fused chains ----------------------------------------------------------------

proto::OpDesc Binary(const std::string& type, const std::string& x, const std::string& y, const std::string& out) {
  return OpBuilder(type).In("X", {x}).In("Y", {y}).Out("Out", {out}).Build();
}
proto::OpDesc Unary(const std::string& type, const std::string& x, const std::string& out) {
  return OpBuilder(type).In("X", {x}).Out("Out", {out}).Build();
}
proto::OpDesc ScaleOp(const std::string& x, const std::string& out, float scale, float bias, bool after) {
  return OpBuilder("scale")
      .In("X", {x})
      .Out("Out", {out})
      .Attr("scale", scale)
      .Attr("bias", bias)
      .Attr("bias_after_scale", after)
      .Build();
}
proto::OpDesc Gelu(const std::string& x, const std::string& out, bool approximate) {
  return OpBuilder("gelu").In("X", {x}).Out("Out", {out}).Attr("approximate", approximate).Build();
}

// 20 forward ops over x [3,n] with a bias b [n] broadcast twice; every
// intermediate stays bounded (exp reads a sigmoid, div divides by an exp).
TEST(JitOpsTest, TwentyOpForwardChainIsOneKernel) {
  std::mt19937 rng(9);
  for (int64_t n : {int64_t{1000}, int64_t{4099}}) {
    Cluster c;
    c.ops = {
        Binary("elementwise_add", "x", "b", "t1"),
        Unary("relu", "t1", "t2"),
        Binary("elementwise_mul", "t2", "w", "t3"),
        Unary("tanh", "t3", "t4"),
        ScaleOp("t4", "t5", 2.0f, 0.5f, true),
        Gelu("t5", "t6", false),
        Unary("sigmoid", "t6", "t7"),
        Binary("elementwise_sub", "t7", "t3", "t8"),
        Unary("exp", "t7", "t9"),
        Binary("elementwise_div", "t8", "t9", "t10"),
        Gelu("t10", "t11", true),
        ScaleOp("t11", "t12", -1.5f, 0.25f, false),
        Binary("elementwise_mul", "t12", "t4", "t13"),
        Binary("elementwise_add", "t13", "b", "t14"),
        Unary("tanh", "t14", "t15"),
        Unary("relu", "t15", "t16"),
        Binary("elementwise_add", "t16", "t2", "t17"),
        Unary("sigmoid", "t17", "t18"),
        Binary("elementwise_mul", "t18", "x", "t19"),
        Binary("elementwise_sub", "t19", "t5", "out"),
    };
    c.inputs = {{"x", Uniform({3, n}, rng)}, {"b", Uniform({n}, rng)}, {"w", Uniform({3, n}, rng)}};
    // An intermediate that is also an output leaves the kernel as well.
    c.outputs = {"out", "t10"};
    c.tol = kTranscendental;
    CheckCluster("20-op chain " + SizeName(n), c, kOneGeneratedKernel);
  }
}

// h = x*w, g = gelu(h), o = g + b and their grads, with w and b [n]
// broadcast over x [2,n]: one iteration space, so one kernel that also sums
// w@GRAD and b@GRAD over the rows.
TEST(JitOpsTest, ForwardAndBackwardChainIsOneKernel) {
  std::mt19937 rng(10);
  for (int64_t n : {int64_t{1000}, int64_t{4099}}) {
    const proto::OpDesc mul = Binary("elementwise_mul", "x", "w", "h");
    const proto::OpDesc gelu = Gelu("h", "g", false);
    const proto::OpDesc add = Binary("elementwise_add", "g", "b", "o");
    Cluster c;
    c.ops = {mul,
             gelu,
             add,
             GradOf(add, {GradVarName("g"), GradVarName("b")}),
             GradOf(gelu, {GradVarName("h")}),
             GradOf(mul, {GradVarName("x"), GradVarName("w")})};
    c.inputs = {{"x", Uniform({2, n}, rng)},
                {"w", Uniform({n}, rng)},
                {"b", Uniform({n}, rng)},
                {GradVarName("o"), Uniform({2, n}, rng)}};
    c.outputs = {"o", GradVarName("x"), GradVarName("w"), GradVarName("b")};
    c.tol = kTranscendental;
    CheckCluster("mul-gelu-add forward and backward " + SizeName(n), c, kOneGeneratedKernel);
  }
}

// An input updated in place through a chain (x = x + y; x = relu(x)) and
// read afterwards: x is both an input and an output (aliased), the kernel
// reads it and writes it back.
TEST(JitOpsTest, InPlaceChainOnAnInput) {
  std::mt19937 rng(15);
  for (int64_t n : kSizes) {
    Cluster c;
    c.ops = {Binary("elementwise_add", "x", "y", "x"), Unary("relu", "x", "x"), ScaleOp("x", "out", 0.5f, 1.0f, true)};
    c.inputs = {{"x", Uniform({3, n}, rng)}, {"y", Uniform({n}, rng)}};
    c.outputs = {"x", "out"};
    CheckCluster("x += y, x = relu(x), out = scale(x) " + SizeName(n), c, kOneGeneratedKernel);
  }
}

// Spaces above FusedElementwiseKernel::kParallelMinElements run on several
// threads; reduction outputs then sum per-thread partials.
TEST(JitOpsTest, LargeSpacesSplitOverThreads) {
  std::mt19937 rng(16);
  const int64_t big = 2 * jit::FusedElementwiseKernel::kParallelMinElements + 13;
  const std::vector<BinaryShape> shapes = {{"X[big] Y[1]", {big}, {1}, -1},
                                           {"X[4,big/4] Y[big/4]", {4, big / 4}, {big / 4}, -1},
                                           {"X[big/7,7] Y[big/7,1]", {big / 7, 7}, {big / 7, 1}, -1}};
  for (const BinaryShape& s : shapes) {
    for (const std::string& type : {std::string("elementwise_mul"), std::string("elementwise_sub")}) {
      Cluster c;
      const proto::OpDesc fwd = BinaryOp(type, s.axis);
      c.ops = {fwd, GradOf(fwd, {GradVarName("x"), GradVarName("y")})};
      c.inputs = BinaryInputs(type, s, rng);
      c.outputs = {"out", GradVarName("x"), GradVarName("y")};
      c.output_tol[GradVarName("y")] = SumTol(Numel(s.x) / Numel(s.y), type == "elementwise_mul" ? 9.0 : 3.0);
      CheckCluster(type + " and grad " + s.name, c, kOneGeneratedKernel);
    }
  }
}

// A whole training step of r = relu(x*w + b): forward, backward and sgd on
// w and b, which the forward reads. The [4,n] space is one kernel, the [n]
// parameter updates (after the forward has read w and b) another.
TEST(JitOpsTest, TrainingStepWithInPlaceSgd) {
  std::mt19937 rng(17);
  for (int64_t n : {int64_t{17}, int64_t{1000}}) {
    const proto::OpDesc mul = Binary("elementwise_mul", "x", "w", "h");
    const proto::OpDesc add = Binary("elementwise_add", "h", "b", "o");
    const proto::OpDesc relu = Unary("relu", "o", "r");
    auto sgd = [](const std::string& p) {
      return OpBuilder("sgd")
          .In("Param", {p})
          .In("Grad", {GradVarName(p)})
          .In("LearningRate", {"lr"})
          .Out("ParamOut", {p})
          .Build();
    };
    Cluster c;
    c.ops = {mul,
             add,
             relu,
             GradOf(relu, {GradVarName("o")}),
             GradOf(add, {GradVarName("h"), GradVarName("b")}),
             GradOf(mul, {GradVarName("w")}),
             sgd("w"),
             sgd("b")};
    c.inputs = {{"x", Uniform({4, n}, rng)},
                {"w", Uniform({n}, rng)},
                {"b", Uniform({n}, rng)},
                {GradVarName("r"), Uniform({4, n}, rng)},
                {"lr", Scalar(0.01f)}};
    c.outputs = {"r", "w", "b"};
    CheckCluster("training step " + SizeName(n), c, KernelCount{2, 0});
  }
}

// ---- framework ops in a cluster -------------------------------------------------------

// matmul, softmax, reshape2 and reduce_sum run their framework kernels on the
// program's buffers; the elementwise ops between them are generated kernels.
TEST(JitOpsTest, NonElementwiseOpsRunFrameworkKernels) {
  std::mt19937 rng(11);
  Cluster c;
  c.ops = {
      OpBuilder("matmul").In("X", {"x"}).In("Y", {"w"}).Out("Out", {"a"}).Build(),
      Binary("elementwise_add", "a", "bias", "b"),
      Unary("relu", "b", "r"),
      OpBuilder("softmax").In("X", {"r"}).Out("Out", {"s"}).Build(),
      OpBuilder("reshape2").In("X", {"s"}).Out("Out", {"e"}).Attr("shape", std::vector<int64_t>{2, 0, -1}).Build(),
      OpBuilder("reduce_sum")
          .In("X", {"e"})
          .Out("Out", {"f"})
          .Attr("dim", std::vector<int64_t>{1})
          .Attr("keep_dim", false)
          .Build(),
      ScaleOp("f", "out", 3.0f, 1.0f, true),
  };
  c.inputs = {{"x", Uniform({6, 33}, rng)}, {"w", Uniform({33, 20}, rng, -0.3, 0.3)}, {"bias", Uniform({20}, rng)}};
  c.outputs = {"s", "out"};
  c.tol = kTranscendental;
  // matmul, softmax and reshape2 on framework kernels; add+relu, reduce_sum
  // and scale generated (the reduction's space differs from scale's).
  CheckCluster("matmul softmax reshape2 reduce_sum", c, KernelCount{3, 3});
}

// ---- reductions -----------------------------------------------------------------------

struct ReduceCase {
  std::string name;
  Dims x;
  std::vector<int64_t> dim;
  bool keep_dim = false;
  bool reduce_all = false;
};

std::vector<ReduceCase> ReduceCases(int64_t n) {
  return {{"[3,n,5] dim 1", {3, n, 5}, {1}},
          {"[n,7] dim -1 keep", {n, 7}, {-1}, true},
          {"[2,n,3] dims 0,2", {2, n, 3}, {0, 2}},
          {"[n,4] all", {n, 4}, {0}, false, true},
          {"[4,3,n] dim 0 keep", {4, 3, n}, {0}, true}};
}

proto::OpDesc ReduceOp(const std::string& type, const ReduceCase& rc) {
  return OpBuilder(type)
      .In("X", {"x"})
      .Out("Out", {"out"})
      .Attr("dim", rc.dim)
      .Attr("keep_dim", rc.keep_dim)
      .Attr("reduce_all", rc.reduce_all)
      .Build();
}

// reduce_sum / reduce_mean and their grads compile to one generated kernel
// each (a reduction output; a broadcast input) and match the reference.
TEST(JitOpsTest, ReduceSumAndMeanForwardAndGrad) {
  std::mt19937 rng(17);
  for (const std::string type : {"reduce_sum", "reduce_mean"}) {
    for (int64_t n : kSizes) {
      for (const ReduceCase& rc : ReduceCases(n)) {
        const proto::OpDesc fwd = ReduceOp(type, rc);
        Cluster c;
        c.ops = {fwd};
        c.inputs = {{"x", Uniform(rc.x, rng)}};
        c.outputs = {"out"};
        c.tol = SumTol(Numel(rc.x), 3.0);
        CheckCluster(type + " " + rc.name + " " + SizeName(n), c, kOneGeneratedKernel);

        Cluster g;
        g.ops = {GradOf(fwd, {GradVarName("x")})};
        auto scope = test::RunOps({fwd}, c.inputs, /*use_onednn=*/false);
        g.inputs = {{"x", c.inputs["x"]}, {GradVarName("out"), Uniform(scope->GetVar("out")->Get().dims(), rng)}};
        g.outputs = {GradVarName("x")};
        CheckCluster(type + "_grad " + rc.name + " " + SizeName(n), g, kOneGeneratedKernel);
      }
    }
  }
}

// 2x2/2 max-pool gradient on kiln's kernel: ties go to the first maximum of
// each window in row-major order, as the reference kernel does; odd widths
// and widths past 16 windows exercise the scalar tail and the vector body.
TEST(JitOpsTest, MaxPool2x2GradMatchesReferenceWithTies) {
  std::mt19937 rng(5);
  for (const Dims& dims : {Dims{2, 3, 4, 6}, Dims{1, 2, 10, 38}, Dims{3, 1, 2, 2}}) {
    Cluster c;
    const auto attrs = [](OpBuilder b) {
      return b.Attr("pooling_type", std::string("max"))
          .Attr("ksize", std::vector<int64_t>{2, 2})
          .Attr("strides", std::vector<int64_t>{2, 2})
          .Build();
    };
    c.ops = {attrs(OpBuilder("pool2d").In("X", {"x"}).Out("Out", {"o"})),
             attrs(OpBuilder("pool2d_grad").In("X", {"x"}).In("Out", {"o"}).In("Out@GRAD", {"g"}).Out("X@GRAD", {"dx"}))};
    // Small integers: many windows hold their maximum twice or more.
    Tensor x(DataType::kFP32, dims);
    float* p = x.mutable_data<float>();
    std::uniform_int_distribution<int> small(0, 2);
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<float>(small(rng));
    c.inputs = {{"x", x}, {"g", Uniform({dims[0], dims[1], dims[2] / 2, dims[3] / 2}, rng)}};
    c.outputs = {"o", "dx"};
    CheckCluster("max-pool grad " + DimsToString(dims), c, KernelCount{0, 2});
  }
}

// An in-place framework op (softmax writes r in place) between two
// elementwise ops: the relu after it must read the softmax's result, not the
// value of r the first group computed.
TEST(JitOpsTest, ElementwiseOpAfterInPlaceFrameworkOpReadsItsResult) {
  std::mt19937 rng(12);
  Cluster c;
  c.ops = {
      Binary("elementwise_add", "x", "y", "r"),
      OpBuilder("softmax").In("X", {"r"}).Out("Out", {"r"}).Build(),
      ScaleOp("r", "out", 2.0f, -0.1f, true),
  };
  c.inputs = {{"x", Uniform({4, 37}, rng)}, {"y", Uniform({37}, rng)}};
  c.outputs = {"out"};
  c.tol = kTranscendental;
  CheckCluster("add, softmax in place, scale", c, KernelCount{2, 1});
}

// ---- a unit that cannot be compiled ----------------------------------------------------

// X [2,3,2,3,2,3] + Y [2,1,2,1,2,1]: the broadcast pattern alternates in
// every dim, so the iteration space collapses to 6 dims, more than generated
// kernels take. That group falls back alone to the framework kernel; the
// relu and scale beside it stay one generated kernel.
TEST(JitOpsTest, AGroupThatCannotBeLaidOutFallsBackAlone) {
  std::mt19937 rng(13);
  Cluster c;
  c.ops = {Binary("elementwise_add", "x", "y", "sum"), Unary("relu", "z", "r"), ScaleOp("r", "s", 2.0f, 1.0f, true)};
  c.inputs = {{"x", Uniform({2, 3, 2, 3, 2, 3}, rng)}, {"y", Uniform({2, 1, 2, 1, 2, 1}, rng)},
              {"z", Uniform({5, 7}, rng)}};
  c.outputs = {"sum", "s"};
  CheckCluster("6-dim broadcast beside a chain", c, KernelCount{1, 1});
  std::unique_ptr<Scope> reference = test::RunOps(c.ops, c.inputs, /*use_onednn=*/false);
  const JitSubgraph sg = MakeSubgraph(c, *reference);
  const jit::ShapeSignature sig = SignatureOf(sg, c.inputs);
  for (Isa isa : TestedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    const auto obj = jit::Lower(JitSubgraphFingerprint(sg), sg, sig, OptionsFor(isa));
    ASSERT_EQ(obj->unit_fallbacks.size(), 1u) << obj->lowering;
    EXPECT_NE(obj->unit_fallbacks[0].find("collapse to 6 dims"), std::string::npos) << obj->lowering;
    EXPECT_NE(obj->lowering.find("#0 elementwise_add -> framework_op"), std::string::npos) << obj->lowering;
    jit::CompileCacheOptions options;
    options.compile = OptionsFor(isa);
    jit::CompileCache compiler(options);
    const std::string key = compiler.AddSubgraph(sg);
    EXPECT_NE(compiler.Compile(key, sig), nullptr);
    EXPECT_EQ(compiler.stats().failures, 0);
    EXPECT_EQ(compiler.stats().compiles, 1);
    EXPECT_EQ(compiler.stats().unit_fallbacks, 1);
  }
}

// Every op the registry marks as lowerable to generated code has a case above.
TEST(JitOpsTest, EveryLowerableOpIsCovered) {
  std::set<std::string> covered = {"sgd", "momentum", "adam", "adamw"};
  for (const std::string& t : kBinaryOps) covered.insert({t, t + "_grad"});
  for (const UnaryCase& u : UnaryCases()) covered.insert({u.op.type(), u.op.type() + "_grad"});
  covered.insert("dropout_grad");  // DropoutGradTest.JitMatchesReferenceOnBothIsas (dropout_op_test.cc)
  covered.insert({"reduce_sum", "reduce_sum_grad", "reduce_mean", "reduce_mean_grad"});  // ReduceSumAndMean...
  // MathOpsJitTest, SigmoidCeJitTest, WhereJitTest, CompareJitTest and CastJitTest, in the ops' own tests.
  for (const std::string t : {"log", "sqrt", "rsqrt", "abs", "pow", "leaky_relu", "softplus", "where",
                              "sigmoid_cross_entropy_with_logits"}) {
    covered.insert({t, t + "_grad"});
  }
  covered.insert({"less_than", "less_equal", "greater_than", "greater_equal", "equal", "not_equal", "cast"});
  // UnaryMathOpsJitTest, OnnxActivationOpsJitTest, TrigOpsJitTest and LogicalOpsJitTest (issue 28's ops).
  for (const std::string t : {"erf", "floor", "ceil", "round", "sign", "reciprocal", "softsign", "elu", "selu", "celu",
                              "hard_sigmoid", "hard_swish", "thresholded_relu"}) {
    covered.insert({t, t + "_grad"});
  }
  for (const std::string t : {"tan", "asin", "acos", "atan", "asinh", "acosh", "atanh"}) covered.insert(t + "_grad");
  covered.insert({"logical_and", "logical_or", "logical_xor", "logical_not", "isnan", "isinf"});
  // BinaryOpsJitTest and ElementwisePowOpJitTest.
  for (const std::string t : {"elementwise_max", "elementwise_min", "elementwise_pow"}) covered.insert({t, t + "_grad"});
  covered.insert({"expand_v2", "expand_v2_grad"});  // TileExpandOpsJitTest
  covered.insert({"reduce_l1", "reduce_l1_grad", "reduce_l2_grad", "logsumexp_grad"});  // ReduceNormOpsJitTest
  covered.insert({"prelu", "prelu_grad"});  // PreluOpJitTest
  covered.insert("grad_merge");  // GradMergeJitTest (grad_merge_ops_test.cc), fused with each gated update too
  std::set<std::string> lowerable;
  for (const std::string& t : OpRegistry::Global().Types()) {
    const JitLowering j = OpRegistry::Global().Get(t).jit;
    if (j == JitLowering::kElementwise || j == JitLowering::kOptimizer || OpRegistry::Global().Get(t).elementwise) {
      lowerable.insert(t);
    }
  }
  EXPECT_EQ(lowerable, covered);
}

}  // namespace
}  // namespace kiln
