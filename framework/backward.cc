#include "framework/backward.h"

#include <algorithm>
#include <map>
#include <set>

#include "framework/op_desc.h"
#include "framework/operator.h"
#include "framework/suggest.h"
#include "framework/validate.h"

namespace kiln {
namespace {

bool IsFloat(const proto::VarDesc& v) {
  return v.dtype() == proto::FP32 || v.dtype() == proto::FP64;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "f32[-1,3]".
std::string Describe(const proto::VarDesc& v) { return DataTypeName(FromProto(v.dtype())) + DimsToString(VarDims(v)); }

std::string Base(const std::string& grad) { return grad.substr(0, grad.size() - 5); }  // strips "@GRAD"

// The index of the last op writing each target (throws when none does); the
// pass goes in after the largest.
int LastTargetWriter(const proto::BlockDesc& block, const BackwardSpec& spec) {
  int last = -1;
  for (const auto& t : spec.targets) {
    const proto::VarDesc* v = FindVarDesc(block, t);
    if (v == nullptr) ThrowNotFound("append_backward: loss variable '", t, "' is not declared");
    // An integer or bool target (arg_max's, a comparison's) has no gradient;
    // without this check the walk would blame the op that made it.
    if (!IsFloat(*v)) {
      ThrowInvalidArgument("append_backward: loss '", t, "' has dtype ", DataTypeName(FromProto(v->dtype())),
                           "; expected f32 or f64 (gradients flow through floating-point vars only)");
    }
    int writer = -1;
    for (int i = 0; i < block.ops_size(); ++i) {
      for (const auto& a : AllOutputArgs(block.ops(i))) {
        if (a == t) writer = i;
      }
    }
    if (writer < 0) ThrowInvalidArgument("append_backward: no op writes the loss '", t, "'");
    last = std::max(last, writer);
  }
  return last;
}

// Which vars receive a gradient and which ops lie on the path: walk back from
// the targets through differentiable input slots of float vars that are not
// stop_gradient (or are asked for).
struct Path {
  std::set<std::string> has_grad;
  std::vector<bool> on_path;
};

Path FindPath(const proto::BlockDesc& block, const BackwardSpec& spec, int last, const OpRegistry& registry) {
  Path p{{spec.targets.begin(), spec.targets.end()}, std::vector<bool>(last + 1, false)};
  for (int i = last; i >= 0; --i) {
    const proto::OpDesc& op = block.ops(i);
    bool flows = false;
    for (const auto& a : AllOutputArgs(op)) flows |= p.has_grad.count(a) > 0;
    if (!flows) continue;
    const OpInfo& info = registry.Get(op.type());
    bool any_input = false;
    for (const auto& slot : op.inputs()) {
      const auto& skip = info.no_grad_inputs;
      if (std::find(skip.begin(), skip.end(), slot.name()) != skip.end()) continue;
      for (const auto& a : slot.args()) {
        if (a == kEmptyVarName) continue;
        const proto::VarDesc* v = FindVarDesc(block, a);
        if (v == nullptr) ThrowInvalidArgument(OpLabel(op, i), ": variable '", a, "' is not declared");
        if (IsFloat(*v) && (!v->stop_gradient() || spec.wrt.count(a))) {
          p.has_grad.insert(a);
          any_input = true;
        }
      }
    }
    if (!any_input) continue;
    if (!info.grad_maker) {
      ThrowInvalidArgument("append_backward: ", OpLabel(op, i), " lies on the path to ", QuotedNames(spec.targets),
                           " but has no gradient");
    }
    p.on_path[i] = true;
  }
  return p;
}

// The op that gives target k its incoming gradient.
proto::OpDesc SeedOp(const proto::BlockDesc& block, const BackwardSpec& spec, size_t k) {
  const std::string& t = spec.targets[k];
  const proto::VarDesc& tv = *FindVarDesc(block, t);
  const std::string given = k < spec.target_grads.size() ? spec.target_grads[k] : "";
  if (!given.empty()) {
    const proto::VarDesc* g = FindVarDesc(block, given);
    if (g == nullptr) ThrowNotFound("append_backward: target gradient '", given, "' is not declared");
    if (g->dtype() != tv.dtype() || !std::equal(g->dims().begin(), g->dims().end(), tv.dims().begin(), tv.dims().end())) {
      ThrowInvalidArgument("append_backward: target gradient '", given, "' ", Describe(*g), " does not match target '",
                           t, "' ", Describe(tv));
    }
    return OpBuilder("scale").In("X", {given}).Out("Out", {GradVarName(t)}).Build();
  }
  const bool known = std::none_of(tv.dims().begin(), tv.dims().end(), [](int64_t d) { return d < 0; });
  if (!known) {  // ones of the target's run-time dims
    return OpBuilder("fill_any_like").In("X", {t}).Out("Out", {GradVarName(t)}).Attr("value", 1.0f).Build();
  }
  return OpBuilder("fill_constant")
      .Out("Out", {GradVarName(t)})
      .Attr("shape", std::vector<int64_t>(tv.dims().begin(), tv.dims().end()))
      .Attr("value", 1.0f)
      .Attr("dtype", static_cast<int64_t>(tv.dtype()))
      .Build();
}

// The grad ops in reverse order, pruned to the gradients that exist.
std::vector<proto::OpDesc> GradOps(const proto::BlockDesc& block, const Path& path, int last,
                                   const OpRegistry& registry) {
  std::vector<proto::OpDesc> backward;
  for (int i = last; i >= 0; --i) {
    if (!path.on_path[i]) continue;
    const proto::OpDesc& op = block.ops(i);
    std::set<std::string> fwd_outputs;
    for (const auto& a : AllOutputArgs(op)) fwd_outputs.insert(a);
    for (proto::OpDesc g : registry.Get(op.type()).grad_maker(op)) {
      for (auto& s : *g.mutable_inputs()) {
        for (auto& a : *s.mutable_args()) {
          // An out-grad whose forward var gets no gradient is absent (zeros).
          if (EndsWith(a, kGradSuffix) && fwd_outputs.count(Base(a)) && !path.has_grad.count(Base(a))) {
            a = kEmptyVarName;
          }
        }
      }
      bool writes_any = false;
      for (auto& s : *g.mutable_outputs()) {
        for (auto& a : *s.mutable_args()) {
          if (EndsWith(a, kGradSuffix) && !path.has_grad.count(Base(a))) a = kEmptyVarName;
          writes_any |= a != kEmptyVarName;
        }
      }
      if (writes_any) backward.push_back(std::move(g));
    }
  }
  return backward;
}

// Gradients written by several grad ops: every write renamed, and summed
// right after the last one. All writers of v@GRAD precede its readers (the
// grad ops of v's producer come later in reverse order).
std::vector<proto::OpDesc> Accumulate(std::vector<proto::OpDesc> backward) {
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
  std::map<size_t, std::vector<std::string>> sums_after;
  for (const auto& [name, k] : last_writer) sums_after[k].push_back(name);
  std::vector<proto::OpDesc> ordered;
  for (size_t k = 0; k < backward.size(); ++k) {
    ordered.push_back(std::move(backward[k]));
    for (const auto& name : sums_after[k]) ordered.push_back(OpBuilder("sum").In("X", parts[name]).Out("Out", {name}).Build());
  }
  return ordered;
}

// Names the new ops write that the block already declares (an earlier
// backward pass's gradients) get a suffix "@<n>" in every new op, so this
// pass never overwrites them. Returns old -> new.
std::map<std::string, std::string> AvoidTakenNames(const proto::BlockDesc& block, std::vector<proto::OpDesc>* ops) {
  std::map<std::string, std::string> renamed;
  std::set<std::string> taken;
  for (const auto& v : block.vars()) taken.insert(v.name());
  for (const auto& g : *ops) {
    for (const auto& a : AllOutputArgs(g)) {
      if (a == kEmptyVarName || !taken.count(a) || renamed.count(a)) continue;
      int n = 1;
      while (taken.count(a + "@" + std::to_string(n))) ++n;
      renamed[a] = a + "@" + std::to_string(n);
      taken.insert(renamed[a]);
    }
  }
  if (renamed.empty()) return renamed;
  for (auto& g : *ops) {
    for (auto* slots : {g.mutable_inputs(), g.mutable_outputs()}) {
      for (auto& s : *slots) {
        for (auto& a : *s.mutable_args()) {
          auto it = renamed.find(a);
          if (it != renamed.end()) a = it->second;
        }
      }
    }
  }
  return renamed;
}

// The gradient var of `name` that `ops` write ("" when none does).
std::string GradOf(const std::string& name, const std::map<std::string, std::string>& renamed) {
  auto it = renamed.find(GradVarName(name));
  return it == renamed.end() ? GradVarName(name) : it->second;
}

// Declares gradient vars like their forward vars (shape inference declares
// the other intermediates a grad maker introduced).
void DeclareGrads(proto::BlockDesc* block, const std::vector<proto::OpDesc>& ops,
                  const std::map<std::string, std::string>& renamed) {
  std::map<std::string, std::string> original;  // new name -> the v@GRAD it stands for
  for (const auto& [from, to] : renamed) original[to] = from;
  for (const auto& g : ops) {
    for (const auto& a : AllOutputArgs(g)) {
      if (a == kEmptyVarName || FindVarDesc(*block, a) != nullptr) continue;
      const std::string name = original.count(a) ? original[a] : a;
      const size_t at = name.find(kGradSuffix);
      if (at == std::string::npos) continue;
      const proto::VarDesc* fwd = FindVarDesc(*block, name.substr(0, at));
      if (fwd == nullptr) continue;
      proto::VarDesc* v = block->add_vars();
      v->set_name(a);
      v->set_dtype(fwd->dtype());
      *v->mutable_dims() = fwd->dims();
    }
  }
}

}  // namespace

std::map<std::string, std::string> AppendBackwardPass(proto::ProgramDesc* program, const BackwardSpec& spec,
                                                      const OpRegistry& registry) {
  if (program->blocks_size() == 0) ThrowInvalidArgument("append_backward: program has no blocks");
  if (spec.targets.empty()) ThrowInvalidArgument("append_backward: no targets");
  // target_grads pairs with targets by position: an extra one would be
  // dropped without a word (a list off by one seeds the wrong target).
  if (spec.target_grads.size() > spec.targets.size()) {
    ThrowInvalidArgument("append_backward: ", spec.target_grads.size(), " target gradients for ",
                         spec.targets.size(), " targets");
  }
  proto::ProgramDesc trial = *program;  // the program changes only when everything succeeded
  proto::BlockDesc* block = trial.mutable_blocks(0);
  const int last = LastTargetWriter(*block, spec);

  // The forward part must be valid on its own (the ops after the targets may
  // read gradients that do not exist yet).
  {
    proto::BlockDesc scratch = *block;
    BlockVarIndex index(&scratch);
    for (int i = 0; i <= last; ++i) InferShapeAtBuild(&scratch, i, /*declare_outputs=*/false, registry, &index);
  }
  const Path path = FindPath(*block, spec, last, registry);
  std::vector<proto::OpDesc> backward;
  for (size_t k = 0; k < spec.targets.size(); ++k) backward.push_back(SeedOp(*block, spec, k));
  for (auto& g : GradOps(*block, path, last, registry)) backward.push_back(std::move(g));
  std::vector<proto::OpDesc> ordered = Accumulate(std::move(backward));
  const std::map<std::string, std::string> renamed = AvoidTakenNames(*block, &ordered);
  for (auto& g : ordered) SetAttr(&g, kOpRoleAttr, Attribute(std::string(kOpRoleBackward)));
  DeclareGrads(block, ordered, renamed);

  // Splice the backward ops in after the last target's writer, then infer the
  // shapes of the inserted ops.
  google::protobuf::RepeatedPtrField<proto::OpDesc> ops;
  for (int i = 0; i <= last; ++i) *ops.Add() = block->ops(i);
  const int count = static_cast<int>(ordered.size());
  for (auto& g : ordered) *ops.Add() = std::move(g);
  for (int i = last + 1; i < block->ops_size(); ++i) *ops.Add() = block->ops(i);
  block->mutable_ops()->Swap(&ops);
  BlockVarIndex index(block);
  for (int i = last + 1; i <= last + count; ++i) InferShapeAtBuild(block, i, /*declare_outputs=*/true, registry, &index);

  std::map<std::string, std::string> grads;
  for (const auto& v : path.has_grad) grads[v] = GradOf(v, renamed);
  // Swapped in, so a caller's pointer to block 0 stays valid.
  program->mutable_blocks(0)->Swap(trial.mutable_blocks(0));
  return grads;
}

std::vector<std::pair<std::string, std::string>> AppendBackward(proto::ProgramDesc* program,
                                                                const std::string& loss,
                                                                const OpRegistry& registry) {
  BackwardSpec spec;
  spec.targets = {loss};
  const auto grads = AppendBackwardPass(program, spec, registry);
  std::vector<std::pair<std::string, std::string>> params;
  for (const auto& v : program->blocks(0).vars()) {
    if (v.persistable() && grads.count(v.name()) && v.name() != loss) params.emplace_back(v.name(), grads.at(v.name()));
  }
  return params;
}

}  // namespace kiln
