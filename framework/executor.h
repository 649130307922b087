// Executor: runs one block's ops in order over a Scope.
//
// Prepare() resolves each op's registry entry, attributes and kernel once and
// works out when every intermediate dies; Run() binds the plan to a scope and
// executes it. Non-persistable vars written in the block are freed after their
// last use unless they are fetched; when only ops that read a var's shape
// remain (no-need-buffer inputs), its buffer is released earlier and its dims
// kept for them.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "framework/onednn/settings.h"
#include "framework/op_registry.h"
#include "framework/proto/framework.pb.h"
#include "framework/scope.h"

namespace kiln {

class PeakTracker;

struct ExecutorOptions {
  bool use_onednn = true;          // oneDNN kernels where an op has one
  bool check_nan_inf = false;      // stop at the first op that writes NaN/Inf
  bool free_intermediates = true;  // free dead intermediates after their last use
  // With free_intermediates: release a var's buffer after its last data use
  // when the ops after that read only its shape (OpInfo::no_need_buffer).
  bool release_shape_only = true;
  // When set, records there the op during which the allocator's peak of live
  // bytes rose highest, and what was live then. Costs two allocator reads per
  // op. The tracker outlives the runs; executors may share one.
  PeakTracker* peak = nullptr;
  // How the oneDNN kernels run (framework/onednn/settings.h): every op's
  // ExecContext carries it.
  onednn::Settings onednn{};
};

// Where the highest peak of live tensor bytes seen by the executors that
// record into one PeakTracker happened.
struct PeakRecord {
  size_t peak_bytes = 0;    // allocator peak_in_use_bytes reached during the op
  size_t in_use_after = 0;  // live bytes right after the op, before its dead inputs are freed
  std::string op;           // op label, with the compilation key for a jit_launch
  struct Live {
    std::string name;
    size_t bytes = 0;
  };
  std::vector<Live> live;   // scope vars holding buffers then, largest first (shared buffers once)
};

// The highest peak of its executors' runs (ExecutorOptions::peak).
// Thread-safe: executors on several threads may record into one tracker.
class PeakTracker {
 public:
  PeakRecord Get() const;
  void Reset();
  // Calls `fill` (under the tracker's lock) with the record to overwrite
  // when `peak_bytes` is above the highest peak recorded so far.
  void Update(size_t peak_bytes, const std::function<void(PeakRecord*)>& fill);

 private:
  mutable std::mutex mu_;
  PeakRecord peak_;
};

class ExecutionPlan {
 public:
  struct PreparedOp {
    const OpInfo* info = nullptr;
    proto::OpDesc desc;
    AttrMap attrs;
    int index = 0;
    std::vector<SlotVars> inputs;   // vars bound per scope
    std::vector<SlotVars> outputs;
    std::vector<Variable*> free_after;  // bound per scope
    std::vector<std::string> free_after_names;
    std::vector<Variable*> release_after;  // buffer dropped, dims kept (shape-only)
    std::vector<std::string> release_after_names;
  };

  const proto::BlockDesc& block() const { return block_; }
  const std::vector<PreparedOp>& ops() const { return ops_; }
  // Names of vars freed after op i.
  const std::vector<std::string>& FreedAfter(size_t i) const { return ops_[i].free_after_names; }

 private:
  friend class Executor;
  proto::BlockDesc block_;
  std::vector<PreparedOp> ops_;
  uint64_t bound_generation_ = 0;  // Scope::generation() of the scope bound, 0: none
};

// Index of the first NaN/Inf element of an FP32/FP64 tensor, or -1 (also for
// other dtypes and tensors without data).
int64_t FirstNonFinite(const Tensor& t);
// "NaN", "+Inf" or "-Inf": element i of t.
std::string NonFiniteName(const Tensor& t, int64_t i);

class Executor {
 public:
  explicit Executor(ExecutorOptions options = {}, const OpRegistry& registry = OpRegistry::Global())
      : options_(options), registry_(registry) {}

  // `keep`: vars that must survive the run (fetch targets).
  std::unique_ptr<ExecutionPlan> Prepare(const proto::ProgramDesc& program, int block_id,
                                         const std::set<std::string>& keep) const;

  // Runs the plan over `scope`, creating the block's vars there when missing.
  void Run(ExecutionPlan& plan, Scope& scope) const;

  // Prepare + run once: every var of the block survives (nothing is freed).
  void RunProgram(const proto::ProgramDesc& program, Scope& scope) const;

  const ExecutorOptions& options() const { return options_; }

 private:
  void Bind(ExecutionPlan& plan, Scope& scope) const;
  void CheckNanInf(const ExecutionPlan::PreparedOp& op) const;
  void CheckInputsNanInf(const ExecutionPlan::PreparedOp& op, std::set<const Variable*>* written) const;

  ExecutorOptions options_;
  const OpRegistry& registry_;
};

// Copies `value` into the scope var `name` (creating it), or with `share`
// makes the var share value's buffer (zero-copy: the caller must not write the
// buffer while the program runs; ops never write a fed var). Throws when the
// block declares `name` with another dtype or incompatible dims.
void FeedTensor(const proto::BlockDesc& block, Scope& scope, const std::string& name, const Tensor& value,
                bool share = false);

}  // namespace kiln
