#include "framework/ops/apply_gate.h"

#include <string>
#include <utility>
#include <vector>

#include "framework/ops/kernel_util_a.h"

namespace kiln {
namespace {

using InplacePairs = std::vector<std::pair<std::string, std::string>>;

void CheckApplyInput(const InferShapeContext& ctx) {
  if (!ctx.HasInput("Apply")) return;
  ops_a::CheckFloatInput(ctx, "Apply");
  for (int64_t d : ctx.InputDims("Apply")) {
    if (d != 1 && d != -1) ctx.Fail("input Apply: expected one element ([1]), got ", DimsToString(ctx.InputDims("Apply")));
  }
}

// Apply == 0: the step leaves every state as it was. In place (the usual
// program) there is nothing to write; otherwise each output gets a copy.
void KeepInputs(ExecContext& ctx, const InplacePairs& inplace) {
  for (const auto& [in, out] : inplace) {
    Tensor* dst = ctx.OutputOrNull(out);
    const Tensor& src = ctx.Input(in);
    if (dst != nullptr && dst != &src) dst->CopyFrom(src);
  }
}

// The in-place input var of fragment write `w` (the input slot paired with
// the output slot that names it); "" when none does.
std::string OldValueOf(const EwOpView& v, const InplacePairs& inplace, const std::string& w) {
  for (const auto& [in, out] : inplace) {
    if (v.Out(out) == w) return v.In(in);
  }
  return "";
}

// Appends the old value of each write and the flag to the fragment's reads
// and wraps its emit: write k = select(apply, new_k, old_k). False when a
// write has no in-place input (the op then runs its framework kernel).
bool GateFragment(const EwOpView& v, const InplacePairs& inplace, const std::string& apply, EwFragment& f) {
  const size_t n = f.reads.size();
  std::vector<size_t> old_index;
  for (const EwAccess& w : f.writes) {
    const std::string old = OldValueOf(v, inplace, w.var);
    if (old.empty()) return false;
    size_t k = 0;
    while (k < f.reads.size() && !(f.reads[k].var == old && f.reads[k].dims == w.dims)) ++k;
    if (k == f.reads.size()) f.reads.push_back({old, w.dims});
    old_index.push_back(k);
  }
  const size_t flag = f.reads.size();
  f.reads.push_back(EwOpView::Scalar(apply, f.iter.size()));
  f.emit = [emit = std::move(f.emit), n, old_index, flag](EwProgram& p, const std::vector<EwValue>& in) {
    std::vector<EwValue> out = emit(p, std::vector<EwValue>(in.begin(), in.begin() + n));
    for (size_t k = 0; k < out.size(); ++k) out[k] = p.Select(in[flag], out[k], in[old_index[k]]);
    return out;
  };
  return true;
}

}  // namespace

OpInfo WithApplyGate(OpInfo op) {
  op.inputs.push_back(ops_a::Optional("Apply"));
  op.no_grad_inputs.push_back("Apply");
  op.doc += "; optional Apply ([1]): at 0 every output keeps its input's value (gradient merge's accumulating steps)";
  op.infer_shape = [infer = std::move(op.infer_shape)](InferShapeContext& ctx) {
    infer(ctx);
    CheckApplyInput(ctx);
  };
  op.reference_kernel = [kernel = std::move(op.reference_kernel), inplace = op.inplace](ExecContext& ctx) {
    // A named flag must hold a value (ReadScalar fails otherwise): a missing
    // one must not silently update.
    if (ctx.InputVar("Apply") != nullptr && ops_a::ReadScalar(ctx, "Apply") == 0) {
      KeepInputs(ctx, inplace);
      return;
    }
    kernel(ctx);
  };
  if (!op.elementwise) return op;
  op.elementwise = [lower = std::move(op.elementwise), inplace = op.inplace](const EwOpView& v) {
    std::vector<EwFragment> frags = lower(v);
    const std::string apply = v.In("Apply");
    if (apply.empty()) return frags;
    for (EwFragment& f : frags) {
      if (!GateFragment(v, inplace, apply, f)) return std::vector<EwFragment>{};
    }
    return frags;
  };
  return op;
}

}  // namespace kiln
