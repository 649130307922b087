// Helpers of the oneDNN parity tests (onednn_parity_test,
// onednn_parity_eltwise_test): a op's oneDNN kernel against its reference
// kernel, forward and grad, with a check that oneDNN did the work.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "framework/onednn/handlers.h"
#include "framework/onednn/onednn_handler.h"
#include "framework/onednn/onednn_kernels.h"
#include "framework/onednn/primitive_cache.h"
#include "framework/op_registry.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace onednn_parity_test {

using test::RandomTensor;

constexpr double kAtol = 1e-5;
constexpr double kRtol = 1e-4;

enum class Expect { kOneDnn, kFallback };

// oneDNN 2.6 has its jit softmax and log-softmax backward for AVX-512
// (avx512_core) only; other CPUs get its generic one, which the kernels
// refuse by default (SlowImplementationsFallBackByDefault).
inline Expect SoftmaxBackwardByDefault() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? Expect::kOneDnn
                                                                                 : Expect::kFallback;
}

struct Tolerance {
  double atol = kAtol;
  double rtol = kRtol;
};

inline std::string Describe(const proto::OpDesc& op, const std::map<std::string, Tensor>& inputs) {
  std::string s = op.type() + "(";
  for (const auto& [name, t] : inputs) s += name + ":" + t.ShapeString() + " ";
  for (const auto& a : op.attrs()) s += a.name() + "=" + AttrToString(AttrFromProto(a)) + " ";
  return s + ")";
}

// Every case must run on oneDNN, including those where oneDNN only has a
// generic implementation that the kernels refuse by default (see
// SlowImplementationsFallBackByDefault): parity of the descriptors is checked
// on all of them. The oneDNN runs use these settings unless told otherwise.
inline const onednn::Settings kParitySettings = test::AllowSlowOneDnn();

// Runs `op` with the reference kernels and with oneDNN (with `onednn`),
// compares every output arg, and checks whether the oneDNN kernel of
// op.type() handled the call.
inline void ExpectParity(const proto::OpDesc& op, const std::map<std::string, Tensor>& inputs, Expect expect = Expect::kOneDnn,
                  Tolerance tol = {}, const onednn::Settings& onednn = kParitySettings) {
  SCOPED_TRACE(Describe(op, inputs));
  const int64_t before = OneDnnKernelRuns(op.type());
  auto ref = test::RunOp(op, inputs, /*use_onednn=*/false);
  ASSERT_EQ(OneDnnKernelRuns(op.type()), before) << "use_onednn=false ran the oneDNN kernel";
  auto dnn = test::RunOp(op, inputs, /*use_onednn=*/true, onednn);
  EXPECT_EQ(OneDnnKernelRuns(op.type()), before + (expect == Expect::kOneDnn ? 1 : 0))
      << (expect == Expect::kOneDnn ? "the oneDNN kernel fell back to the reference"
                                    : "the oneDNN kernel ran where it should fall back");
  int compared = 0;
  for (const auto& slot : op.outputs()) {
    for (const auto& arg : slot.args()) {
      if (arg == kEmptyVarName) continue;
      const Tensor& want = ref->GetVar(arg)->Get();
      ASSERT_TRUE(want.initialized()) << "reference did not write " << arg;
      const Variable* got = dnn->FindVar(arg);
      ASSERT_TRUE(got != nullptr && got->Get().initialized()) << "oneDNN run did not write " << arg;
      EXPECT_EQ(test::CompareTensors(got->Get(), want, tol.atol, tol.rtol), "") << "output " << slot.name();
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
}

// Builds the grad op of `fwd` with its grad maker, feeds it the forward inputs,
// the forward outputs (computed by the reference) and random gradients for
// every forward output, and checks parity of the grad op. Gradients named in
// `skip` are not requested (their args become @EMPTY@).
inline void ExpectGradParity(const proto::OpDesc& fwd, const std::map<std::string, Tensor>& inputs, std::mt19937& rng,
                      Expect expect = Expect::kOneDnn, Tolerance tol = {}, const std::set<std::string>& skip = {},
                      const onednn::Settings& onednn = kParitySettings) {
  SCOPED_TRACE("grad of " + Describe(fwd, inputs));
  const OpInfo& info = OpRegistry::Global().Get(fwd.type());
  ASSERT_TRUE(info.grad_maker) << fwd.type();
  std::vector<proto::OpDesc> grads = info.grad_maker(fwd);
  ASSERT_EQ(grads.size(), 1u);
  proto::OpDesc g = grads[0];

  auto base = test::RunOp(fwd, inputs, /*use_onednn=*/false);
  std::map<std::string, Tensor> feed = inputs;
  for (const auto& slot : fwd.outputs()) {
    for (const auto& arg : slot.args()) {
      const Tensor& out = base->GetVar(arg)->Get();
      feed[arg].CopyFrom(out);
      feed[GradVarName(arg)] = RandomTensor(out.dims(), DataType::kFP32, rng);
    }
  }
  for (auto& slot : *g.mutable_inputs()) {
    for (auto& arg : *slot.mutable_args()) {
      if (!feed.count(arg)) arg = kEmptyVarName;
    }
  }
  for (auto& slot : *g.mutable_outputs()) {
    for (auto& arg : *slot.mutable_args()) {
      if (skip.count(arg)) arg = kEmptyVarName;
    }
  }
  std::map<std::string, Tensor> grad_feed;
  for (const auto& slot : g.inputs()) {
    for (const auto& arg : slot.args()) {
      if (arg != kEmptyVarName) grad_feed[arg].CopyFrom(feed.at(arg));
    }
  }
  ExpectParity(g, grad_feed, expect, tol, onednn);
}

inline std::mt19937& Rng() {
  static std::mt19937 rng(20261122);
  return rng;
}

inline Tensor Rand(const Dims& dims, double lo = -1.0, double hi = 1.0) {
  return RandomTensor(dims, DataType::kFP32, Rng(), lo, hi);
}

}  // namespace onednn_parity_test
}  // namespace kiln
