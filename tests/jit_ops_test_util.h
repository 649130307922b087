// Helpers of the JIT-against-reference op tests (jit_ops_test,
// jit_optimizer_ops_test, jit_fused_chains_test): a cluster is a small list of
// ops with FP32 inputs; CheckCluster runs it once through the reference
// kernels (the oracle) and once per ISA through jit::Lower and the
// runtime::Runner, the way jit_launch runs a cluster, and compares every
// requested output.
#pragma once

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
namespace jit_ops_test {

using test::CompareTensors;

inline const std::vector<int64_t> kSizes = {1, 15, 16, 17, 1000, 4099};

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
inline Tol SumTol(int64_t count, double term) {
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

inline bool IsGenerated(const runtime::Instruction& ins) { return ins.kernel->name().rfind("ew_", 0) == 0; }

inline std::vector<Isa> TestedIsas() {
  std::vector<Isa> isas;
  if (IsaSupported(Isa::kAvx512)) isas.push_back(Isa::kAvx512);
  if (IsaSupported(Isa::kAvx2)) isas.push_back(Isa::kAvx2);
  return isas;
}

inline Tensor Uniform(const Dims& dims, std::mt19937& rng, double lo = -3.0, double hi = 3.0) {
  return test::RandomTensor(dims, DataType::kFP32, rng, lo, hi);
}

// Values with |v| in [lo, hi] and a random sign.
inline Tensor AwayFromZero(const Dims& dims, std::mt19937& rng, double lo, double hi) {
  Tensor t = Uniform(dims, rng, lo, hi);
  std::bernoulli_distribution negative(0.5);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (negative(rng)) p[i] = -p[i];
  }
  return t;
}

inline Tensor Scalar(float v) { return test::FloatTensor({1}, {v}); }

inline Tensor Copy(const Tensor& t) {
  Tensor c;
  c.CopyFrom(t);
  return c;
}

// The JitSubgraph build_jit_pass would make of `c`: every var with the dims
// and dtype the reference run gave it; inputs are the vars read before any op
// of the cluster writes them (in order of first read).
inline JitSubgraph MakeSubgraph(const Cluster& c, const Scope& reference) {
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

inline jit::ShapeSignature SignatureOf(const JitSubgraph& sg, const std::map<std::string, Tensor>& inputs) {
  jit::ShapeSignature sig;
  for (const std::string& name : sg.inputs) {
    const Tensor& t = inputs.at(name);
    sig.inputs.push_back({t.dtype(), t.dims()});
  }
  return sig;
}

inline jit::CompileOptions OptionsFor(Isa isa) {
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
inline JitRun CompileAndRun(const JitSubgraph& sg, const std::map<std::string, Tensor>& inputs, Isa isa) {
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

inline std::string CountKernels(const jit::CompiledObject& obj, int* generated, int* framework) {
  *generated = *framework = 0;
  for (const runtime::Instruction& ins : obj.program.instructions) ++*(IsGenerated(ins) ? generated : framework);
  return obj.Listing();
}

// Runs `c` through the reference kernels and through the JIT on each ISA and
// compares every output.
inline void CheckCluster(const std::string& what, const Cluster& c, KernelCount expect = {}) {
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

inline std::string SizeName(int64_t n) { return "n=" + std::to_string(n); }

// ---- binary elementwise ops -----------------------------------------------------------

struct BinaryShape {
  std::string name;
  Dims x, y;
  int64_t axis;
};

inline std::vector<BinaryShape> BinaryShapes(int64_t n) {
  return {{"X[n] Y[n]", {n}, {n}, -1},
          {"X[n] Y[1]", {n}, {1}, -1},
          {"X[3,n] Y[n]", {3, n}, {n}, -1},
          {"X[2,5,n] Y[5] axis 1", {2, 5, n}, {5}, 1},
          {"X[n,7] Y[n,1]", {n, 7}, {n, 1}, -1}};
}

inline const std::vector<std::string> kBinaryOps = {"elementwise_add", "elementwise_sub", "elementwise_mul",
                                             "elementwise_div"};

inline proto::OpDesc BinaryOp(const std::string& type, int64_t axis) {
  return OpBuilder(type).In("X", {"x"}).In("Y", {"y"}).Out("Out", {"out"}).Attr("axis", axis).Build();
}

// The grad op the registry's grad maker makes for `fwd`, with the input
// grads not in `keep` dropped (@EMPTY@).
inline proto::OpDesc GradOf(const proto::OpDesc& fwd, const std::set<std::string>& keep) {
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
inline std::map<std::string, Tensor> BinaryInputs(const std::string& type, const BinaryShape& s, std::mt19937& rng) {
  std::map<std::string, Tensor> in;
  in["x"] = Uniform(s.x, rng);
  in["y"] = type == "elementwise_div" ? AwayFromZero(s.y, rng, 0.5, 3.0) : Uniform(s.y, rng);
  in[GradVarName("out")] = Uniform(s.x, rng);
  return in;
}

}  // namespace jit_ops_test
}  // namespace kiln
