#include "framework/backward.h"

#include <algorithm>
#include <map>
#include <set>

#include "framework/validate.h"

namespace kiln {
namespace {

bool IsFloat(const proto::VarDesc& v) {
  return v.dtype() == proto::FP32 || v.dtype() == proto::FP64;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The index of the last op that writes `loss`, which must be declared and
// floating point: an integer or bool loss (arg_max's, a comparison's) has no
// gradient, and without this check the walk below would blame the op that
// made it for having no grad maker.
int FindLossOp(const proto::BlockDesc& block, const std::string& loss) {
  const proto::VarDesc* loss_var = FindVarDesc(block, loss);
  if (loss_var == nullptr) ThrowNotFound("append_backward: loss variable '", loss, "' is not declared");
  if (!IsFloat(*loss_var)) {
    ThrowInvalidArgument("append_backward: loss '", loss, "' has dtype ", DataTypeName(FromProto(loss_var->dtype())),
                         "; expected f32 or f64 (gradients flow through floating-point vars only)");
  }
  int loss_op = -1;
  for (int i = 0; i < block.ops_size(); ++i) {
    for (const auto& a : AllOutputArgs(block.ops(i))) {
      if (a == loss) loss_op = i;
    }
  }
  if (loss_op < 0) ThrowInvalidArgument("append_backward: no op writes the loss '", loss, "'");
  return loss_op;
}

// 1. Which vars receive a gradient: walk back from the loss through
//    differentiable input slots of float, non-stop_gradient vars. Marks in
//    `on_path` the ops whose grad ops are needed.
std::set<std::string> VarsWithGradient(const proto::BlockDesc& block, int loss_op, const std::string& loss,
                                       const OpRegistry& registry, std::vector<bool>* on_path) {
  auto var_of = [&](const std::string& name, int op_index) -> const proto::VarDesc& {
    const proto::VarDesc* v = FindVarDesc(block, name);
    if (v == nullptr) {
      ThrowInvalidArgument(OpLabel(block.ops(op_index), op_index), ": variable '", name, "' is not declared");
    }
    return *v;
  };
  std::set<std::string> has_grad = {loss};
  on_path->assign(loss_op + 1, false);
  for (int i = loss_op; i >= 0; --i) {
    const proto::OpDesc& op = block.ops(i);
    bool flows = false;
    for (const auto& a : AllOutputArgs(op)) flows |= has_grad.count(a) > 0;
    if (!flows) continue;
    const OpInfo& info = registry.Get(op.type());
    bool any_input = false;
    for (const auto& slot : op.inputs()) {
      if (std::find(info.no_grad_inputs.begin(), info.no_grad_inputs.end(), slot.name()) !=
          info.no_grad_inputs.end()) {
        continue;
      }
      for (const auto& a : slot.args()) {
        if (a == kEmptyVarName) continue;
        const proto::VarDesc& v = var_of(a, i);
        if (IsFloat(v) && !v.stop_gradient()) {
          has_grad.insert(a);
          any_input = true;
        }
      }
    }
    if (!any_input) continue;
    if (!info.grad_maker) {
      ThrowInvalidArgument("append_backward: ", OpLabel(op, i), " lies on the path to '", loss,
                           "' but has no gradient");
    }
    (*on_path)[i] = true;
  }
  return has_grad;
}

// 2. Grad ops in reverse order, pruned to the gradients that exist/are needed.
std::vector<proto::OpDesc> MakeGradOps(const proto::BlockDesc& block, const proto::VarDesc& loss_var,
                                       const std::vector<bool>& on_path, const std::set<std::string>& has_grad,
                                       const OpRegistry& registry) {
  std::vector<proto::OpDesc> backward = {
      OpBuilder("fill_constant")
          .Out("Out", {GradVarName(loss_var.name())})
          .Attr("shape", std::vector<int64_t>(loss_var.dims().begin(), loss_var.dims().end()))
          .Attr("value", 1.0f)
          .Attr("dtype", static_cast<int64_t>(loss_var.dtype()))
          .Build()};
  for (int i = static_cast<int>(on_path.size()) - 1; i >= 0; --i) {
    if (!on_path[i]) continue;
    const proto::OpDesc& op = block.ops(i);
    std::set<std::string> fwd_outputs;
    for (const auto& a : AllOutputArgs(op)) fwd_outputs.insert(a);
    for (proto::OpDesc g : registry.Get(op.type()).grad_maker(op)) {
      for (auto& s : *g.mutable_inputs()) {
        for (auto& a : *s.mutable_args()) {
          // An out-grad whose forward var gets no gradient is absent (zeros).
          if (EndsWith(a, kGradSuffix)) {
            const std::string base = a.substr(0, a.size() - 5);
            if (fwd_outputs.count(base) && !has_grad.count(base)) a = kEmptyVarName;
          }
        }
      }
      bool writes_any = false;
      for (auto& s : *g.mutable_outputs()) {
        for (auto& a : *s.mutable_args()) {
          if (EndsWith(a, kGradSuffix)) {
            const std::string base = a.substr(0, a.size() - 5);
            if (!has_grad.count(base)) a = kEmptyVarName;
          }
          writes_any |= a != kEmptyVarName;
        }
      }
      if (writes_any) backward.push_back(std::move(g));
    }
  }
  return backward;
}

// 3. Accumulate gradients written by several grad ops: rename every write
//    and sum them right after the last one. All writers of v@GRAD precede
//    its readers (the grad ops of v's producer come later in reverse order).
std::vector<proto::OpDesc> AccumulateGradients(std::vector<proto::OpDesc> backward) {
  std::map<std::string, int> writes;
  for (const auto& g : backward) {
    for (const auto& a : AllOutputArgs(g)) {
      if (a != kEmptyVarName && EndsWith(a, kGradSuffix)) ++writes[a];
    }
  }
  std::map<std::string, std::vector<std::string>> parts;
  std::map<std::string, size_t> last_writer;
  for (size_t k = 0; k < backward.size(); ++k) {
    for (auto& s : *backward[k].mutable_outputs()) {
      for (auto& a : *s.mutable_args()) {
        if (a == kEmptyVarName || writes[a] < 2) continue;
        const std::string orig = a;
        a = orig + "@RENAME@" + std::to_string(parts[orig].size());
        parts[orig].push_back(a);
        last_writer[orig] = k;
      }
    }
  }
  std::vector<proto::OpDesc> ordered;
  std::map<size_t, std::vector<std::string>> sums_after;
  for (const auto& [name, k] : last_writer) sums_after[k].push_back(name);
  for (size_t k = 0; k < backward.size(); ++k) {
    ordered.push_back(backward[k]);
    for (const auto& name : sums_after[k]) ordered.push_back(OpBuilder("sum").In("X", parts[name]).Out("Out", {name}).Build());
  }
  return ordered;
}

// 4. Declare gradient vars like their forward vars.
void DeclareGradVars(const std::vector<proto::OpDesc>& ordered, proto::BlockDesc* block) {
  for (const auto& g : ordered) {
    for (const auto& a : AllOutputArgs(g)) {
      if (a == kEmptyVarName || FindVarDesc(*block, a) != nullptr) continue;
      const std::string base = a.substr(0, a.find(kGradSuffix));
      const proto::VarDesc* fwd = FindVarDesc(*block, base);
      if (fwd == nullptr || a.find(kGradSuffix) == std::string::npos) continue;  // declared by shape inference
      proto::VarDesc* v = block->add_vars();
      v->set_name(a);
      v->set_dtype(fwd->dtype());
      *v->mutable_dims() = fwd->dims();
    }
  }
}

}  // namespace

std::vector<std::pair<std::string, std::string>> AppendBackward(proto::ProgramDesc* program,
                                                                const std::string& loss,
                                                                const OpRegistry& registry) {
  if (program->blocks_size() == 0) ThrowInvalidArgument("append_backward: program has no blocks");
  proto::BlockDesc* block = program->mutable_blocks(0);
  const int loss_op = FindLossOp(*block, loss);

  // The forward part must be valid on its own (the ops after the loss may
  // read gradients that do not exist yet).
  {
    proto::BlockDesc scratch = *block;
    BlockVarIndex index(&scratch);
    for (int i = 0; i <= loss_op; ++i) InferShapeAtBuild(&scratch, i, /*declare_outputs=*/false, registry, &index);
  }

  std::vector<bool> on_path;
  const std::set<std::string> has_grad = VarsWithGradient(*block, loss_op, loss, registry, &on_path);
  std::vector<proto::OpDesc> ordered =
      AccumulateGradients(MakeGradOps(*block, *FindVarDesc(*block, loss), on_path, has_grad, registry));
  DeclareGradVars(ordered, block);

  // 5. Splice the backward ops in after the loss op, then infer shapes of the
  //    inserted ops (declares any other intermediate a grad maker introduced).
  google::protobuf::RepeatedPtrField<proto::OpDesc> ops;
  for (int i = 0; i <= loss_op; ++i) *ops.Add() = block->ops(i);
  for (auto& g : ordered) *ops.Add() = std::move(g);
  for (int i = loss_op + 1; i < block->ops_size(); ++i) *ops.Add() = block->ops(i);
  block->mutable_ops()->Swap(&ops);
  const int first = loss_op + 1;
  const int last = first + static_cast<int>(ordered.size());
  BlockVarIndex index(block);
  for (int i = first; i < last; ++i) InferShapeAtBuild(block, i, /*declare_outputs=*/true, registry, &index);

  std::vector<std::pair<std::string, std::string>> params;
  for (const auto& v : block->vars()) {
    if (v.persistable() && has_grad.count(v.name()) && v.name() != loss) {
      params.emplace_back(v.name(), GradVarName(v.name()));
    }
  }
  return params;
}

}  // namespace kiln
