// Shared checks of unary elementwise ops (the unary_op.h functors of
// unary_math_ops, trig_ops and onnx_activation_ops): values against a formula
// in double, grads against finite differences, and the JIT's generated
// kernels against the reference kernels on the AVX-512 and AVX2 paths.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/isa.h"
#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "runtime/runner.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"

namespace kiln::test {

// An op with attrs, its formula in double, and the range of X its tests
// draw from: |X| in [lo, hi], of both signs when `signed_x`, kept away from
// kinks and jumps (checked separately).
struct UnaryVariant {
  std::string type;
  AttrMap attrs;
  std::function<double(double)> f;
  double lo, hi;
  bool signed_x;
};

inline proto::OpDesc UnaryOp(const std::string& type, const AttrMap& attrs = {}) {
  OpBuilder b(type);
  b.In("X", {"x"}).Out("Out", {"out"});
  for (const auto& [k, v] : attrs) b.Attr(k, v);
  return b.Build();
}

inline std::string VariantName(const UnaryVariant& v) {
  std::string s = v.type;
  for (const auto& [k, a] : v.attrs) s += " " + k + "=" + AttrToString(a);
  return s;
}

inline Tensor DrawVariant(const UnaryVariant& v, const Dims& dims, DataType dtype, std::mt19937& rng) {
  Tensor t(dtype, dims);
  std::uniform_real_distribution<double> mag(v.lo, v.hi);
  std::bernoulli_distribution negative(v.signed_x ? 0.5 : 0.0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double x = negative(rng) ? -mag(rng) : mag(rng);
    if (dtype == DataType::kFP32) {
      t.mutable_data<float>()[i] = static_cast<float>(x);
    } else {
      t.mutable_data<double>()[i] = x;
    }
  }
  return t;
}

// A tensor of `dtype` (f32 or f64) holding `values`.
inline Tensor ValuesTensor(const std::vector<double>& values, DataType dtype) {
  Tensor t(dtype, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DataType::kFP32) {
      t.mutable_data<float>()[i] = static_cast<float>(values[i]);
    } else {
      t.mutable_data<double>()[i] = values[i];
    }
  }
  return t;
}

// Each variant's reference kernel against its formula, f32 and f64, at sizes
// 1, 7, 17, 33 (`tol` absolute and relative for f32; 1e-13 for f64).
inline void ExpectMatchesFormulas(const std::vector<UnaryVariant>& variants, double tol32 = 2e-6) {
  std::mt19937 rng(1);
  for (DataType dtype : {DataType::kFP32, DataType::kFP64}) {
    const double tol = dtype == DataType::kFP32 ? tol32 : 1e-13;
    for (int64_t n : {1, 7, 17, 33}) {
      for (const UnaryVariant& v : variants) {
        const Tensor x = DrawVariant(v, {n}, dtype, rng);
        const Tensor got = RunAndGet(UnaryOp(v.type, v.attrs), {{"x", x}}, "out");
        std::vector<double> want(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) want[i] = v.f(ValueAt(x, i));
        EXPECT_EQ(got.dtype(), dtype);
        EXPECT_EQ(CompareTensors(got, ValuesTensor(want, dtype), tol, tol), "") << VariantName(v) << " n=" << n;
      }
    }
  }
}

inline void ExpectGradsMatchFiniteDifferences(const std::vector<UnaryVariant>& variants, double tol = 1e-5) {
  std::mt19937 rng(2);
  for (const Dims& dims : {Dims{1}, Dims{7}, Dims{3, 11}}) {
    for (const UnaryVariant& v : variants) {
      const Tensor x = DrawVariant(v, dims, DataType::kFP64, rng);
      GradCheckOptions o;
      o.rtol = tol;
      o.atol = tol;
      EXPECT_EQ(CheckGrad(UnaryOp(v.type, v.attrs), {{"x", x}}, {"x"}, {"out"}, o), "")
          << VariantName(v) << DimsToString(dims);
    }
  }
}

// X@GRAD of `type` at x with Out@GRAD dout (f32), through its grad op.
inline Tensor GradAt(const std::string& type, const AttrMap& attrs, const std::vector<float>& x,
                     const std::vector<float>& dout) {
  const proto::OpDesc g = OpRegistry::Global().Get(type).grad_maker(UnaryOp(type, attrs))[0];
  const Dims dims = {static_cast<int64_t>(x.size())};
  const Tensor xt = FloatTensor(dims, x);
  const Tensor out = RunAndGet(UnaryOp(type, attrs), {{"x", xt}}, "out");
  auto scope = RunOp(g, {{"x", xt}, {"out", out}, {"out@GRAD", FloatTensor(dims, dout)}});
  Tensor r;
  r.CopyFrom(scope->GetVar("x@GRAD")->Get());
  return r;
}

inline std::vector<Isa> TestedIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (IsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

// The one-op cluster of the variant's forward (x -> out) or grad (x or out,
// and out@GRAD -> x@GRAD), with x given.
inline LoweringCase UnaryCase(const UnaryVariant& v, const Tensor& x, Isa isa, bool grad) {
  LoweringCase c;
  c.name = v.type;
  c.options.isa = isa;
  c.given["x"] = x;
  const Dims dims = x.dims();
  if (!grad) {
    c.ops = {UnaryOp(v.type, v.attrs)};
    c.inputs = {{"x", dims}};
    c.outputs = {"out"};
    return c;
  }
  c.ops = {OpRegistry::Global().Get(v.type).grad_maker(UnaryOp(v.type, v.attrs))[0]};
  const std::vector<std::string> reads_x = InputArgs(c.ops[0], "X"), reads_out = InputArgs(c.ops[0], "Out");
  if (!reads_out.empty()) {
    c.given["out"] = RunAndGet(UnaryOp(v.type, v.attrs), {{"x", x}}, "out");
    c.inputs = {{"out", dims}};
  } else if (!reads_x.empty()) {
    c.inputs = {{"x", dims}};
  }
  c.inputs.push_back({"out@GRAD", dims});
  c.outputs = {"x@GRAD"};
  return c;
}

// The generated kernel (one, named ew_...) of the variant's forward or grad
// against the reference kernel.
inline void ExpectGeneratedKernelMatches(const UnaryVariant& v, const Tensor& x, Isa isa, bool grad, double atol,
                                         double rtol) {
  SCOPED_TRACE(VariantName(v) + (grad ? " grad " : " ") + DimsToString(x.dims()) + " " + IsaName(isa));
  const LoweringCase c = UnaryCase(v, x, isa, grad);
  const auto obj = CheckLoweringNumerics(c, atol, rtol, static_cast<unsigned>(x.numel()));
  ASSERT_EQ(obj->program.instructions.size(), 1u) << obj->Listing();
  EXPECT_EQ(obj->program.instructions[0].kernel->name().rfind("ew_", 0), 0u) << obj->Listing();
}

// Forward and grad of every variant at sizes around the vector widths and an
// odd rank-3 shape, on every ISA this CPU has.
inline void ExpectGeneratedKernelsMatch(const std::vector<UnaryVariant>& variants, double atol = 2e-6,
                                        double rtol = 2e-5) {
  const std::vector<Isa> isas = TestedIsas();
  ASSERT_FALSE(isas.empty()) << "this CPU has neither AVX-512 nor AVX2+FMA";
  std::mt19937 rng(3);
  const std::vector<Dims> shapes = {{1}, {15}, {16}, {17}, {4099}, {3, 5, 7}};
  for (Isa isa : isas) {
    for (const UnaryVariant& v : variants) {
      for (const Dims& dims : shapes) {
        const Tensor x = DrawVariant(v, dims, DataType::kFP32, rng);
        ExpectGeneratedKernelMatches(v, x, isa, /*grad=*/false, atol, rtol);
        ExpectGeneratedKernelMatches(v, x, isa, /*grad=*/true, atol, rtol);
      }
    }
  }
}

// The compiled one-op forward cluster of `type` run on f32 `x`: Out.
inline Tensor RunGenerated(const std::string& type, const AttrMap& attrs, const std::vector<float>& x, Isa isa) {
  const UnaryVariant v{type, attrs, nullptr, 0, 0, false};
  const Tensor xt = FloatTensor({static_cast<int64_t>(x.size())}, x);
  const auto obj = LowerCase(UnaryCase(v, xt, isa, /*grad=*/false));
  Tensor in, out(DataType::kFP32, xt.dims());
  in.CopyFrom(xt);
  runtime::Runner::Run(obj->program, {in.raw_data()}, {out.mutable_data<float>()});
  return out;
}

}  // namespace kiln::test
