#include "tests/op_test_util.h"

#include <cmath>
#include <set>
#include <sstream>

#include "framework/op_registry.h"

namespace kiln::test {

Tensor RandomTensor(const Dims& dims, DataType dtype, std::mt19937& rng, double lo, double hi) {
  Tensor t(dtype, dims);
  std::uniform_real_distribution<double> dist(lo, hi);
  if (dtype == DataType::kFP64) {
    double* p = t.mutable_data<double>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  } else if (dtype == DataType::kBOOL) {
    bool* p = t.mutable_data<bool>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng) >= (lo + hi) / 2;
  } else {
    float* p = t.mutable_data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(dist(rng));
  }
  return t;
}

Tensor Int64Tensor(const Dims& dims, const std::vector<int64_t>& values) {
  Tensor t(DataType::kINT64, dims);
  KILN_CHECK(static_cast<int64_t>(values.size()) == t.numel());
  int64_t* p = t.mutable_data<int64_t>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

Tensor FloatTensor(const Dims& dims, const std::vector<float>& values) {
  Tensor t(DataType::kFP32, dims);
  KILN_CHECK(static_cast<int64_t>(values.size()) == t.numel());
  float* p = t.mutable_data<float>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

Tensor CastTo(const Tensor& t, DataType dtype) {
  if (t.dtype() == dtype || (t.dtype() != DataType::kFP32 && t.dtype() != DataType::kFP64)) {
    Tensor out;
    out.CopyFrom(t);
    return out;
  }
  Tensor out(dtype, t.dims());
  if (dtype == DataType::kFP64) {
    const float* s = t.data<float>();
    double* d = out.mutable_data<double>();
    for (int64_t i = 0; i < t.numel(); ++i) d[i] = s[i];
  } else {
    const double* s = t.data<double>();
    float* d = out.mutable_data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) d[i] = static_cast<float>(s[i]);
  }
  return out;
}

double ValueAt(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DataType::kFP32: return t.data<float>()[i];
    case DataType::kFP64: return t.data<double>()[i];
    case DataType::kINT64: return static_cast<double>(t.data<int64_t>()[i]);
    // The byte itself: a bool that is neither 0 nor 1 shows.
    case DataType::kBOOL: return static_cast<const uint8_t*>(t.raw_data())[i];
    default: KILN_CHECK(false, "ValueAt: unsupported dtype");
  }
  return 0;
}

std::unique_ptr<Scope> RunOps(const std::vector<proto::OpDesc>& ops, const std::map<std::string, Tensor>& inputs,
                              bool use_onednn, const onednn::Settings& onednn, const OpRegistry& registry) {
  proto::ProgramDesc program;
  proto::BlockDesc* block = program.add_blocks();
  block->set_idx(0);
  block->set_parent_idx(-1);
  for (const auto& op : ops) *block->add_ops() = op;
  auto scope = std::make_unique<Scope>();
  for (const auto& [name, t] : inputs) scope->Var(name)->GetMutable()->CopyFrom(t);
  ExecutorOptions options;
  options.use_onednn = use_onednn;
  options.free_intermediates = false;
  options.onednn = onednn;
  Executor exec(options, registry);
  exec.RunProgram(program, *scope);
  return scope;
}

Tensor RunAndGet(const proto::OpDesc& op, const std::map<std::string, Tensor>& inputs, const std::string& out) {
  auto scope = RunOp(op, inputs);
  Tensor t;
  t.CopyFrom(scope->GetVar(out)->Get());
  return t;
}

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string CompareTensors(const Tensor& a, const Tensor& b, double atol, double rtol) {
  std::ostringstream os;
  if (a.dims() != b.dims()) {
    os << "dims differ: " << a.ShapeString() << " vs " << b.ShapeString();
    return os.str();
  }
  double worst = 0;
  int64_t worst_i = -1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = ValueAt(a, i), y = ValueAt(b, i);
    // NaN matches NaN and an infinity the same infinity; NaN against a number never matches.
    const bool same_special = (std::isnan(x) && std::isnan(y)) || (std::isinf(y) && x == y);
    const double excess = same_special                     ? 0.0
                          : std::isnan(x) != std::isnan(y) ? INFINITY
                                                           : std::fabs(x - y) - (atol + rtol * std::fabs(y));
    if (excess > worst || (std::isnan(excess))) {
      worst = std::isnan(excess) ? INFINITY : excess;
      worst_i = i;
    }
  }
  if (worst_i < 0) return "";
  os << "element " << worst_i << " of " << a.ShapeString() << ": got " << ValueAt(a, worst_i) << ", want "
     << ValueAt(b, worst_i) << " (atol " << atol << ", rtol " << rtol << ")";
  return os.str();
}

namespace {

// Replaces args of slots whose vars are not available with @EMPTY@.
void PruneGradOp(proto::OpDesc* g, const std::set<std::string>& available, const std::set<std::string>& wanted) {
  for (auto& s : *g->mutable_inputs()) {
    for (auto& a : *s.mutable_args()) {
      if (!available.count(a)) a = kEmptyVarName;
    }
  }
  for (auto& s : *g->mutable_outputs()) {
    for (auto& a : *s.mutable_args()) {
      if (a.size() > 5 && a.compare(a.size() - 5, 5, kGradSuffix) == 0 && !wanted.count(a)) a = kEmptyVarName;
    }
  }
}

double Loss(const Scope& scope, const std::vector<std::string>& outputs, const std::map<std::string, Tensor>& r) {
  double loss = 0;
  for (const auto& o : outputs) {
    const Tensor& t = scope.GetVar(o)->Get();
    const Tensor& rt = r.at(o);
    for (int64_t i = 0; i < t.numel(); ++i) loss += ValueAt(t, i) * ValueAt(rt, i);
  }
  return loss;
}

}  // namespace

std::string CheckGrad(const proto::OpDesc& fwd, const std::map<std::string, Tensor>& inputs,
                      const std::vector<std::string>& wrt, const std::vector<std::string>& outputs,
                      const GradCheckOptions& options) {
  std::mt19937 rng(options.seed);
  std::map<std::string, Tensor> in64;
  for (const auto& [name, t] : inputs) in64[name] = CastTo(t, DataType::kFP64);

  auto base = RunOp(fwd, in64);
  std::map<std::string, Tensor> r;
  for (const auto& o : outputs) {
    const Tensor& t = base->GetVar(o)->Get();
    r[o] = RandomTensor(t.dims(), DataType::kFP64, rng);
  }

  const OpInfo& info = OpRegistry::Global().Get(fwd.type());
  if (!info.grad_maker) return "op '" + fwd.type() + "' has no grad maker";
  std::vector<proto::OpDesc> grads = info.grad_maker(fwd);

  // Scope for the grad ops: forward inputs, forward outputs and out-grads R.
  std::map<std::string, Tensor> grad_inputs = in64;
  std::set<std::string> available;
  for (const auto& [n, t] : in64) available.insert(n);
  for (const auto& s : fwd.outputs()) {
    for (const auto& a : s.args()) {
      grad_inputs[a].CopyFrom(base->GetVar(a)->Get());
      available.insert(a);
    }
  }
  for (const auto& o : outputs) {
    grad_inputs[GradVarName(o)] = r[o];
    available.insert(GradVarName(o));
  }
  std::set<std::string> wanted;
  for (const auto& w : wrt) wanted.insert(GradVarName(w));
  // Grad ops may read intermediates written by earlier grad ops.
  for (auto& g : grads) {
    PruneGradOp(&g, available, wanted);
    for (const auto& a : AllOutputArgs(g)) available.insert(a);
  }
  auto gscope = RunOps(grads, grad_inputs, /*use_onednn=*/false);

  std::ostringstream problems;
  for (const auto& w : wrt) {
    const Variable* gv = gscope->FindVar(GradVarName(w));
    if (gv == nullptr || !gv->Get().initialized()) {
      problems << GradVarName(w) << " was not computed; ";
      continue;
    }
    const Tensor& analytic = gv->Get();
    const Tensor& x = in64.at(w);
    if (analytic.dims() != x.dims()) {
      problems << GradVarName(w) << " has dims " << DimsToString(analytic.dims()) << ", input has "
               << DimsToString(x.dims()) << "; ";
      continue;
    }
    const int64_t n = x.numel();
    const int64_t step = std::max<int64_t>(1, n / options.max_elements);
    for (int64_t i = 0; i < n; i += step) {
      // Deep copies: Tensor copies share buffers, and the inputs must stay unperturbed.
      std::map<std::string, Tensor> perturbed;
      for (const auto& [name, t] : in64) perturbed[name].CopyFrom(t);
      double* p = perturbed[w].data<double>();
      const double orig = p[i];
      p[i] = orig + options.eps;
      const double lp = Loss(*RunOp(fwd, perturbed), outputs, r);
      p[i] = orig - options.eps;
      const double lm = Loss(*RunOp(fwd, perturbed), outputs, r);
      const double numeric = (lp - lm) / (2 * options.eps);
      const double got = ValueAt(analytic, i);
      if (!(std::fabs(got - numeric) <= options.atol + options.rtol * std::fabs(numeric))) {
        problems << GradVarName(w) << "[" << i << "]: analytic " << got << ", numeric " << numeric << "; ";
        break;
      }
    }
  }
  return problems.str();
}

}  // namespace kiln::test
