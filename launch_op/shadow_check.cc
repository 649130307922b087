#include "launch_op/shadow_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "framework/op_desc.h"

namespace kiln::jit {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string Mismatch(int64_t i, double got, double want) {
  std::ostringstream os;
  os.precision(9);
  os << "flat index " << i << ": jit " << got << ", framework " << want;
  return os.str();
}

// How far `got` is beyond the tolerance around `want` (> 1: a mismatch).
double Excess(double got, double want, const ShadowOptions& t, double spread, OutputDiff* d) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want) ? 0.0 : kInf;
  if (std::isinf(got) || std::isinf(want)) return got == want ? 0.0 : kInf;
  const double err = std::fabs(got - want);
  d->max_abs = std::max(d->max_abs, err);
  if (want != 0.0) d->max_rel = std::max(d->max_rel, err / std::fabs(want));
  const double limit = t.atol + t.rtol * std::fabs(want) + kSpreadAllowance * spread;
  if (limit > 0.0) return err / limit;
  return err == 0.0 ? 0.0 : kInf;
}

template <typename T>
void CompareAs(const Tensor& got, const Tensor& want, const ShadowOptions& t, double spread, bool exact,
               OutputDiff* d) {
  const T* g = got.data<T>();
  const T* w = want.data<T>();
  for (int64_t i = 0; i < d->numel; ++i) {
    const double a = static_cast<double>(g[i]), b = static_cast<double>(w[i]);
    const double excess = exact ? (a == b ? 0.0 : kInf) : Excess(a, b, t, spread, d);
    if (exact && a != b) {
      d->max_abs = std::max(d->max_abs, std::fabs(a - b));
      if (b != 0.0) d->max_rel = std::max(d->max_rel, std::fabs(a - b) / std::fabs(b));
    }
    d->worst = std::max(d->worst, excess);
    if (excess <= 1.0) continue;
    if (d->mismatches++ == 0) d->first_mismatch = Mismatch(i, a, b);
  }
}

// The first op of the cluster that writes `var` (the one whose result the
// later writers, e.g. an in-place update, build on).
std::string FirstWriterOf(const JitSubgraph& sg, const std::string& var) {
  for (int i = 0; i < sg.block.ops_size(); ++i) {
    for (const std::string& a : AllOutputArgs(sg.block.ops(i))) {
      if (a == var) return OpLabel(sg.block.ops(i), i);
    }
  }
  return "no op of the cluster";
}

template <typename T>
double SpreadAs(const Tensor& a, const Tensor& b) {
  const T* x = a.data<T>();
  const T* y = b.data<T>();
  double spread = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::fabs(static_cast<double>(x[i]) - static_cast<double>(y[i]));
    if (std::isfinite(d)) spread = std::max(spread, d);
  }
  return spread;
}

}  // namespace

double Spread(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.dims() != b.dims() || !a.initialized() || !b.initialized()) return 0.0;
  if (a.dtype() == DataType::kFP32) return SpreadAs<float>(a, b);
  if (a.dtype() == DataType::kFP64) return SpreadAs<double>(a, b);
  return 0.0;
}

OutputDiff CompareOutput(const Tensor& got, const Tensor& want, const ShadowOptions& tolerances, double spread) {
  OutputDiff d;
  d.numel = want.numel();
  if (got.dtype() != want.dtype() || got.dims() != want.dims() || got.initialized() != want.initialized()) {
    d.mismatches = std::max<int64_t>(1, d.numel);
    d.worst = kInf;
    d.first_mismatch = "jit gave " + got.ShapeString() + (got.initialized() ? "" : " without data") +
                       ", framework " + want.ShapeString() + (want.initialized() ? "" : " without data");
    return d;
  }
  if (!want.initialized()) return d;
  if (d.numel == 0) return d;
  switch (want.dtype()) {
    case DataType::kFP32: CompareAs<float>(got, want, tolerances, spread, false, &d); break;
    case DataType::kFP64: CompareAs<double>(got, want, tolerances, spread, false, &d); break;
    case DataType::kINT64: CompareAs<int64_t>(got, want, tolerances, 0.0, true, &d); break;
    case DataType::kINT32: CompareAs<int32_t>(got, want, tolerances, 0.0, true, &d); break;
    case DataType::kBOOL: CompareAs<bool>(got, want, tolerances, 0.0, true, &d); break;
    case DataType::kBF16: KILN_CHECK(false, "shadow check: a bf16 cluster output (bf16 exists only inside clusters)");
  }
  return d;
}

std::optional<ShadowFailure> FindShadowFailure(const JitSubgraph& sg, const std::vector<const Tensor*>& got,
                                               const std::vector<const Tensor*>& want,
                                               const ShadowOptions& tolerances,
                                               const std::vector<const Tensor*>& alt) {
  KILN_CHECK(got.size() == sg.outputs.size() && want.size() == sg.outputs.size() &&
                 (alt.empty() || alt.size() == want.size()),
             "shadow check of ", sg.outputs.size(), " outputs got ", got.size(), ", ", want.size(), " and ",
             alt.size());
  std::optional<ShadowFailure> worst;
  double worst_excess = 0.0;
  for (size_t o = 0; o < got.size(); ++o) {
    if (got[o] == nullptr) continue;
    const double spread = alt.empty() ? 0.0 : Spread(*alt[o], *want[o]);
    const OutputDiff d = CompareOutput(*got[o], *want[o], tolerances, spread);
    if (d.mismatches == 0 || (worst && d.worst <= worst_excess)) continue;
    worst_excess = d.worst;
    ShadowFailure f;
    f.var = sg.outputs[o];
    f.op = FirstWriterOf(sg, f.var);
    f.shape = want[o]->ShapeString();
    f.max_abs_error = d.max_abs;
    f.max_rel_error = d.max_rel;
    f.mismatches = d.mismatches;
    f.numel = d.numel;
    f.first_mismatch = d.first_mismatch;
    f.framework_spread = alt.empty() ? -1.0 : spread;
    worst = std::move(f);
  }
  return worst;
}

}  // namespace kiln::jit
