#include "framework/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "framework/operator.h"
#include "framework/suggest.h"

namespace kiln {

void CheckLrSchedule(const LrSchedule& s) {
  const std::vector<std::string> kinds = {"constant", "cosine", "exponential", "noam", "piecewise"};
  if (std::find(kinds.begin(), kinds.end(), s.kind) == kinds.end()) {
    ThrowInvalidArgument("unknown learning-rate schedule '", s.kind,
                         "': expected constant, cosine, exponential, noam or piecewise", DidYouMean(s.kind, kinds));
  }
  if (!std::isfinite(s.learning_rate)) ThrowInvalidArgument("learning_rate must be finite, got ", s.learning_rate);
  if (s.kind == "cosine" && s.T_max <= 0) ThrowInvalidArgument("CosineAnnealingDecay: T_max must be > 0, got ", s.T_max);
  if (s.kind == "exponential" && !(s.gamma > 0)) ThrowInvalidArgument("ExponentialDecay: gamma must be > 0, got ", s.gamma);
  if (s.kind == "noam" && s.warmup_steps <= 0) {
    ThrowInvalidArgument("NoamDecay: warmup_steps must be > 0, got ", s.warmup_steps);
  }
  if (s.kind == "noam" && !(s.d_model > 0)) ThrowInvalidArgument("NoamDecay: d_model must be > 0, got ", s.d_model);
  if (s.kind == "piecewise") {
    if (s.values.size() != s.boundaries.size() + 1) {
      ThrowInvalidArgument("PiecewiseDecay: expected one more value than boundaries, got ", s.boundaries.size(),
                           " boundaries and ", s.values.size(), " values");
    }
    for (size_t i = 1; i < s.boundaries.size(); ++i) {
      if (s.boundaries[i] <= s.boundaries[i - 1]) {
        ThrowInvalidArgument("PiecewiseDecay: boundaries must increase, got ", s.boundaries[i - 1], " then ",
                             s.boundaries[i]);
      }
    }
  }
  if (s.linear_warmup_steps < 0) {
    ThrowInvalidArgument("LinearWarmup: warmup_steps must be >= 0, got ", s.linear_warmup_steps);
  }
}

namespace {

int64_t ParseInt(const std::string& spec, const std::string& key, const std::string& v) {
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size()) ThrowInvalidArgument("--lr_schedule=", spec, ": ", key, " needs an integer, got '", v, "'");
  return n;
}

float ParseFloat(const std::string& spec, const std::string& key, const std::string& v) {
  size_t used = 0;
  float f = 0;
  try {
    f = std::stof(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size()) ThrowInvalidArgument("--lr_schedule=", spec, ": ", key, " needs a number, got '", v, "'");
  return f;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t end = s.find(sep, begin);
    parts.push_back(s.substr(begin, end - begin));
    if (end == std::string::npos) return parts;
    begin = end + 1;
  }
}

}  // namespace

LrSchedule ParseLrSchedule(const std::string& spec, float lr) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::vector<std::string> kinds = {"cosine", "exponential", "piecewise", "noam", "warmup"};
  if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
    ThrowInvalidArgument("--lr_schedule=", spec, ": unknown schedule '", kind,
                         "': expected cosine, exponential, piecewise, noam or warmup", DidYouMean(kind, kinds));
  }
  LrSchedule s;
  s.kind = kind == "warmup" ? "constant" : kind;
  s.learning_rate = lr;
  s.end_lr = lr;
  if (kind == "cosine") s.T_max = 0;  // required
  const std::vector<std::string> keys = {"T_max", "eta_min", "gamma", "boundaries", "values",
                                         "d_model", "warmup_steps", "warmup", "start_lr"};
  if (colon != std::string::npos) {
    for (const std::string& kv : Split(spec.substr(colon + 1), ',')) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) ThrowInvalidArgument("--lr_schedule=", spec, ": expected KEY=VALUE, got '", kv, "'");
      const std::string key = kv.substr(0, eq), v = kv.substr(eq + 1);
      if (key == "T_max") s.T_max = ParseInt(spec, key, v);
      else if (key == "eta_min") s.eta_min = ParseFloat(spec, key, v);
      else if (key == "gamma") s.gamma = ParseFloat(spec, key, v);
      else if (key == "d_model") s.d_model = ParseFloat(spec, key, v);
      else if (key == "warmup_steps") s.warmup_steps = ParseInt(spec, key, v);
      else if (key == "warmup") s.linear_warmup_steps = ParseInt(spec, key, v);
      else if (key == "start_lr") s.start_lr = ParseFloat(spec, key, v);
      else if (key == "boundaries") {
        for (const auto& b : Split(v, '/')) s.boundaries.push_back(ParseInt(spec, key, b));
      } else if (key == "values") {
        for (const auto& f : Split(v, '/')) s.values.push_back(ParseFloat(spec, key, f));
      } else {
        ThrowInvalidArgument("--lr_schedule=", spec, ": unknown key '", key, "'", DidYouMean(key, keys));
      }
    }
  }
  if (kind == "cosine" && s.T_max <= 0) ThrowInvalidArgument("--lr_schedule=", spec, ": cosine needs T_max=N (N > 0)");
  if (kind == "warmup" && s.linear_warmup_steps <= 0) {
    ThrowInvalidArgument("--lr_schedule=", spec, ": warmup needs warmup=N (N > 0)");
  }
  CheckLrSchedule(s);
  return s;
}

namespace {

bool Mentions(const std::vector<std::string>& vars, const std::string& var) {
  return std::find(vars.begin(), vars.end(), var) != vars.end();
}

// The Apply flag of gradient merge (grad_merge_ops.cc) that the updates
// reading `lr` take: the schedule then advances on the steps that update,
// counting updates as Paddle's does. "" when they take none; throws when
// only some take one, or take different ones.
std::string UpdateFlagOf(const proto::BlockDesc& block, const std::string& lr) {
  std::set<std::string> flags;
  bool plain = false;
  for (const auto& op : block.ops()) {
    if (!IsParameterUpdate(op) || !Mentions(InputVars(op), lr)) continue;
    const auto apply = InputArgs(op, "Apply");
    if (apply.empty() || apply[0] == kEmptyVarName) plain = true;
    else flags.insert(apply[0]);
  }
  if (flags.empty()) return "";
  if (plain || flags.size() > 1) {
    ThrowInvalidArgument("lr_schedule: the updates reading '", lr, "' merge gradients over different steps (",
                         plain ? "some do not merge" : "different grad_merge_step counters",
                         "); give each optimizer its own learning rate");
  }
  return *flags.begin();
}

// The index of the first op that writes (reads) `var`; the block's op count
// when none does.
int FirstWriter(const proto::BlockDesc& block, const std::string& var) {
  for (int i = 0; i < block.ops_size(); ++i) {
    if (Mentions(OutputVars(block.ops(i)), var)) return i;
  }
  return block.ops_size();
}
int FirstReader(const proto::BlockDesc& block, const std::string& var) {
  for (int i = 0; i < block.ops_size(); ++i) {
    if (Mentions(InputVars(block.ops(i)), var)) return i;
  }
  return block.ops_size();
}

}  // namespace

std::string AppendLrSchedule(ProgramBuilder& b, const std::string& lr, const LrSchedule& s) {
  CheckLrSchedule(s);
  proto::BlockDesc* block = b.main().mutable_blocks(0);
  if (FindVarDesc(*block, lr) == nullptr) ThrowInvalidArgument("lr_schedule: the program declares no variable '", lr, "'");
  const std::string apply = UpdateFlagOf(*block, lr);
  const std::string step = b.Persistable(lr + ".step", {1}, 0.f);
  OpBuilder op("lr_schedule");
  op.In("Step", {step}).Out("LearningRate", {lr}).Out("StepOut", {step}).Attr("kind", s.kind);
  if (!apply.empty()) op.In("Apply", {apply});
  // Only the attributes the kind reads, so the program prints what it means.
  if (s.kind != "piecewise") op.Attr("learning_rate", s.learning_rate);
  if (s.kind == "cosine") op.Attr("T_max", s.T_max).Attr("eta_min", s.eta_min);
  if (s.kind == "exponential") op.Attr("gamma", s.gamma);
  if (s.kind == "noam") op.Attr("d_model", s.d_model).Attr("warmup_steps", s.warmup_steps);
  if (s.kind == "piecewise") op.Attr("boundaries", s.boundaries).Attr("values", s.values);
  if (s.linear_warmup_steps > 0) {
    op.Attr("linear_warmup_steps", s.linear_warmup_steps).Attr("start_lr", s.start_lr).Attr("end_lr", s.end_lr);
  }
  proto::OpDesc desc = op.Build();
  SetAttr(&desc, kOpRoleAttr, Attribute(std::string(kOpRoleLRSched)));
  // Without gradient merge, first in the block: the op reads only its own
  // counter, and an early write of the learning rate lets a compiled cluster
  // fold each update into the op that makes its gradient (weight_grad_fold),
  // which an lr write between the two would forbid. With gradient merge, right
  // after the flag's producer (grad_merge_step), which must come before the
  // first reader of the learning rate (a gated sgd is never folded anyway).
  int position = 0;
  if (!apply.empty()) {
    const int writer = FirstWriter(*block, apply);
    if (writer < block->ops_size()) {  // a flag nothing writes is fed: first in the block
      if (writer > FirstReader(*block, lr)) {
        ThrowInvalidArgument("lr_schedule: '", apply, "' is written after the first reader of '", lr, "'");
      }
      position = writer + 1;
    }
  }
  b.RawOp(desc);
  auto* ops = block->mutable_ops();
  for (int i = ops->size() - 1; i > position; --i) ops->SwapElements(i, i - 1);
  return step;
}

}  // namespace kiln
