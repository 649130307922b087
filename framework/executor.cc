#include "framework/executor.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "framework/allocator.h"
#include "framework/shape_util.h"
#include "framework/trace.h"

namespace kiln {

std::unique_ptr<ExecutionPlan> Executor::Prepare(const proto::ProgramDesc& program, int block_id,
                                                 const std::set<std::string>& keep) const {
  if (block_id < 0 || block_id >= program.blocks_size()) ThrowInvalidArgument("program has no block ", block_id);
  auto plan = std::make_unique<ExecutionPlan>();
  plan->block_ = program.blocks(block_id);
  const proto::BlockDesc& block = plan->block_;

  // last_use: the last op naming the var at all; last_data_use: the last op
  // writing it or reading its data (not only its shape).
  std::map<std::string, size_t> last_use, last_data_use;
  std::set<std::string> written;
  for (int i = 0; i < block.ops_size(); ++i) {
    const proto::OpDesc& desc = block.ops(i);
    ExecutionPlan::PreparedOp op;
    op.info = &registry_.Get(desc.type());
    op.desc = desc;
    op.index = i;
    CheckSlots(*op.info, desc, i);
    op.attrs = ResolveAttrs(*op.info, desc, i);
    const std::set<std::string> shape_only = NoNeedBufferVars(*op.info, desc);
    for (const auto& s : desc.inputs()) {
      op.inputs.push_back({s.name(), {}, {s.args().begin(), s.args().end()}});
      for (const auto& a : s.args()) {
        last_use[a] = i;
        if (!shape_only.count(a)) last_data_use[a] = i;
      }
    }
    for (const auto& s : desc.outputs()) {
      op.outputs.push_back({s.name(), {}, {s.args().begin(), s.args().end()}});
      for (const auto& a : s.args()) {
        last_use[a] = i;
        last_data_use[a] = i;
        written.insert(a);
      }
    }
    plan->ops_.push_back(std::move(op));
  }
  if (options_.free_intermediates) {
    for (const auto& [name, op_index] : last_use) {
      if (name == kEmptyVarName || !written.count(name) || keep.count(name)) continue;
      const proto::VarDesc* v = FindVarDesc(block, name);
      if (v != nullptr && v->persistable()) continue;
      plan->ops_[op_index].free_after_names.push_back(name);
      // Only shape readers remain after its last data use: release the buffer
      // there and keep its dims for them.
      const size_t data_index = last_data_use[name];
      if (options_.release_shape_only && data_index < op_index) {
        plan->ops_[data_index].release_after_names.push_back(name);
      }
    }
  }
  return plan;
}

void Executor::Bind(ExecutionPlan& plan, Scope& scope) const {
  if (plan.bound_generation_ == scope.generation()) return;
  for (const auto& v : plan.block_.vars()) scope.Var(v.name());
  auto bind = [&scope](std::vector<SlotVars>& slots) {
    for (auto& s : slots) {
      s.vars.clear();
      for (const auto& a : s.args) s.vars.push_back(a == kEmptyVarName ? nullptr : scope.Var(a));
    }
  };
  for (auto& op : plan.ops_) {
    bind(op.inputs);
    bind(op.outputs);
    op.free_after.clear();
    for (const auto& n : op.free_after_names) op.free_after.push_back(scope.Var(n));
    op.release_after.clear();
    for (const auto& n : op.release_after_names) op.release_after.push_back(scope.Var(n));
  }
  plan.bound_generation_ = scope.generation();
}

namespace {

void RecordPeak(const ExecutionPlan::PreparedOp& op, const Scope& scope, size_t peak_before, PeakTracker* tracker) {
  const AllocatorStats st = CachingAllocator::Global().stats();
  if (st.peak_in_use_bytes <= peak_before) return;
  tracker->Update(st.peak_in_use_bytes, [&](PeakRecord* peak) {
    peak->peak_bytes = st.peak_in_use_bytes;
    peak->in_use_after = st.in_use_bytes;
    peak->op = OpLabel(op.desc, op.index);
    if (op.desc.type() == "jit_launch") {
      for (const auto& a : op.desc.attrs()) {
        if (a.name() == "compilation_key") peak->op += " (cluster " + a.s() + ")";
      }
    }
    peak->live.clear();
    std::set<const void*> seen;
    for (const auto& name : scope.LocalVarNames()) {
      const Variable* v = scope.FindLocalVar(name);
      if (v == nullptr || !v->Get().initialized() || !v->Get().allocation()->owned()) continue;
      if (!seen.insert(v->Get().allocation().get()).second) continue;
      peak->live.push_back({name, v->Get().allocation()->size()});
    }
    std::sort(peak->live.begin(), peak->live.end(),
              [](const PeakRecord::Live& a, const PeakRecord::Live& b) { return a.bytes > b.bytes; });
  });
}

}  // namespace

PeakRecord PeakTracker::Get() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

void PeakTracker::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = PeakRecord{};
}

void PeakTracker::Update(size_t peak_bytes, const std::function<void(PeakRecord*)>& fill) {
  std::lock_guard<std::mutex> lock(mu_);
  if (peak_bytes <= peak_.peak_bytes) return;
  fill(&peak_);
}

namespace {

// A traced op's arguments: its label, the kernel that ran, the shapes it
// wrote, and a jit_launch's cluster key.
void AnnotateSpan(const ExecutionPlan::PreparedOp& op, bool onednn, TraceSpan* span) {
  span->Arg("op", OpLabel(op.desc, op.index));
  span->Arg("kernel", onednn ? "oneDNN" : "reference");
  std::string shapes;
  for (const auto& s : op.outputs) {
    for (size_t k = 0; k < s.vars.size(); ++k) {
      if (s.vars[k] == nullptr) continue;
      shapes += (shapes.empty() ? "" : ", ") + s.args[k] + " " + s.vars[k]->Get().ShapeString();
    }
  }
  span->Arg("outputs", shapes);
  if (const proto::AttrDesc* key = FindAttr(op.desc, "compilation_key")) span->Arg("cluster", key->s());
}

}  // namespace

void Executor::Run(ExecutionPlan& plan, Scope& scope) const {
  Bind(plan, scope);
  std::set<const Variable*> written;  // by this run, for --check_nan_inf
  for (auto& op : plan.ops_) {
    const size_t peak_before = options_.peak != nullptr ? CachingAllocator::Global().stats().peak_in_use_bytes : 0;
    if (options_.check_nan_inf) CheckInputsNanInf(op, &written);
    ExecContext ctx(op.desc, op.attrs, op.inputs, op.outputs, op.index, options_.onednn);
    ctx.set_check_nan_inf(options_.check_nan_inf);
    TraceSpan span("op", op.desc.type());
    RunInferShape(*op.info, ctx);
    bool done = false;
    if (options_.use_onednn && op.info->onednn_kernel) done = op.info->onednn_kernel(ctx);
    if (!done) {
      if (!op.info->reference_kernel) ThrowUnimplemented(ctx.OpName(), ": no kernel");
      op.info->reference_kernel(ctx);
    }
    if (Tracer::Global().on()) AnnotateSpan(op, done, &span);
    if (options_.check_nan_inf) CheckNanInf(op);
    if (options_.peak != nullptr) RecordPeak(op, scope, peak_before, options_.peak);
    for (Variable* v : op.release_after) v->GetMutable()->ReleaseBuffer();
    for (Variable* v : op.free_after) v->GetMutable()->Clear();
  }
}

void Executor::RunProgram(const proto::ProgramDesc& program, Scope& scope) const {
  ExecutorOptions o = options_;
  o.free_intermediates = false;
  Executor keep_all(o, registry_);
  auto plan = keep_all.Prepare(program, 0, {});
  keep_all.Run(*plan, scope);
}

int64_t FirstNonFinite(const Tensor& t) {
  if (!t.initialized() || t.raw_data() == nullptr) return -1;
  auto scan = [&t](const auto* p) -> int64_t {
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (!std::isfinite(p[i])) return i;
    }
    return -1;
  };
  if (t.dtype() == DataType::kFP32) return scan(t.data<float>());
  if (t.dtype() == DataType::kFP64) return scan(t.data<double>());
  return -1;
}

std::string NonFiniteName(const Tensor& t, int64_t i) {
  const double v = t.dtype() == DataType::kFP32 ? t.data<float>()[i] : t.data<double>()[i];
  return std::isnan(v) ? "NaN" : (v > 0 ? "+Inf" : "-Inf");
}

void Executor::CheckNanInf(const ExecutionPlan::PreparedOp& op) const {
  for (const auto& s : op.outputs) {
    for (size_t k = 0; k < s.vars.size(); ++k) {
      if (s.vars[k] == nullptr) continue;
      const Tensor& t = s.vars[k]->Get();
      const int64_t i = FirstNonFinite(t);
      if (i < 0) continue;
      ThrowInvalidArgument("--check_nan_inf: ", OpLabel(op.desc, op.index), " wrote ", NonFiniteName(t, i),
                           " to output ", s.name, " (var '", s.args[k], "' ", t.ShapeString(), ") at flat index ",
                           i);
    }
  }
}

// Vars an op reads that this run has not written come from outside it: feeds,
// parameters, loaded checkpoints. Each is checked once, at its first read.
void Executor::CheckInputsNanInf(const ExecutionPlan::PreparedOp& op, std::set<const Variable*>* written) const {
  for (const auto& s : op.inputs) {
    for (size_t k = 0; k < s.vars.size(); ++k) {
      if (s.vars[k] == nullptr || !written->insert(s.vars[k]).second) continue;
      const Tensor& t = s.vars[k]->Get();
      const int64_t i = FirstNonFinite(t);
      if (i < 0) continue;
      ThrowInvalidArgument("--check_nan_inf: var '", s.args[k], "' ", t.ShapeString(), " holds ",
                           NonFiniteName(t, i), " at flat index ", i, " before this program wrote it (a feed, a ",
                           "parameter or a loaded value), read by ", OpLabel(op.desc, op.index), " as ", s.name);
    }
  }
  for (const auto& s : op.outputs) {
    for (Variable* v : s.vars) {
      if (v != nullptr) written->insert(v);
    }
  }
}

void FeedTensor(const proto::BlockDesc& block, Scope& scope, const std::string& name, const Tensor& value,
                bool share) {
  const proto::VarDesc* v = &RequireVarDesc(block, name, "feed");
  if (FromProto(v->dtype()) != value.dtype()) {
    ThrowInvalidArgument("feed '", name, "': expected dtype ", DataTypeName(FromProto(v->dtype())), ", got ",
                         DataTypeName(value.dtype()));
  }
  if (!DimsCompatible(VarDims(*v), value.dims())) {
    ThrowInvalidArgument("feed '", name, "': expected dims ", DimsToString(VarDims(*v)), ", got ",
                         DimsToString(value.dims()));
  }
  Variable* var = scope.Var(name);
  if (share) {
    *var->GetMutable() = value;
  } else {
    var->GetMutable()->CopyFrom(value);
  }
  // A fed value comes from outside: no startup program initialised it
  // (Variable::origin), so re-running the startup that once did keeps it.
  var->set_origin(0);
}

}  // namespace kiln
