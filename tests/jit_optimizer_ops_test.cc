// The JIT against the reference kernels for the optimizer updates (sgd,
// momentum, adam, adamw) at sizes around the vector width, on both ISA
// paths, with gradient clipping folded into the generated updates.
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
#include "tests/jit_ops_test_util.h"

namespace kiln {
namespace {

using namespace jit_ops_test;  // the helpers shared by the split files (tests/jit_ops_test_util.h)

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

}  // namespace
}  // namespace kiln
