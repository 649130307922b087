// Execution units: what the lowering steps turn a cluster's ops into. A unit
// kind is a class; a new lowering adds a kind and a file, never a flag on a
// shared struct. Units come in execution order: a step that fuses ops puts
// the fused unit where it is valid to run and proves that nothing in between
// touches what it moves.
//
// Every op starts as a PendingOp. Steps claim ops by replacing pending units
// with their own kinds; the last step (framework fallback) claims the rest,
// so after the pipeline no PendingOp is left.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compiler/lowering/cluster.h"
#include "compiler/lowering/units/derived_buffer.h"
#include "runtime/program.h"

namespace kiln::jit {

// One instruction a unit becomes.
struct EmittedKernel {
  std::shared_ptr<const runtime::Kernel> kernel;
  std::vector<std::string> args;  // var names: inputs, then outputs
  int num_inputs = 0;
  // Temps the unit introduces that the block does not declare.
  std::vector<proto::VarDesc> new_vars;
  // (input arg, output arg): the output is the input's memory seen with
  // other dims (a reshape). The kernel copies when the two differ, so the
  // buffer plan may alias them or not.
  std::vector<std::pair<int, int>> views;
};

// What a unit sees while it makes its kernels.
class EmitContext {
 public:
  EmitContext(const Cluster& cluster, std::function<bool(const std::string&)> stored)
      : cluster_(cluster), stored_(std::move(stored)) {}
  const Cluster& cluster() const { return cluster_; }
  // True when `var`, written by the unit, is read by another unit or leaves
  // the cluster (a generated kernel stores it; else it stays in registers).
  bool Stored(const std::string& var) const { return stored_(var); }
  // "<prefix>_<n>", n counting per prefix in this cluster: ew_0, matmul_2.
  std::string KernelName(const std::string& prefix) { return prefix + "_" + std::to_string(serial_[prefix]++); }

 private:
  const Cluster& cluster_;
  std::function<bool(const std::string&)> stored_;
  std::map<std::string, int> serial_;
};

class Unit {
 public:
  virtual ~Unit() = default;
  Unit(const Unit&) = delete;
  Unit& operator=(const Unit&) = delete;

  // The kind, as lowering.txt names it ("onednn_matmul", "ew_group", ...).
  virtual const char* kind() const = 0;
  // The step that made it: when the unit cannot be compiled, its ops are
  // kept out of that step and the steps run again.
  const std::string& step() const { return step_; }
  // Cluster ops it computes, ascending.
  const std::vector<int>& ops() const { return ops_; }
  // Vars it reads and writes when it runs.
  const std::set<std::string>& reads() const { return reads_; }
  const std::set<std::string>& writes() const { return writes_; }
  // What it becomes, one line for lowering.txt (after its ops).
  virtual std::string Describe(const Cluster& cluster) const = 0;
  // Makes its kernels. Throws kiln::Error when they cannot be made for these
  // shapes (the unit then falls back alone).
  virtual std::vector<EmittedKernel> Emit(EmitContext& ctx) const = 0;
  // The ops kept out of step() when the unit cannot be compiled: its own
  // (a unit that computes no op names the ops it serves).
  virtual std::vector<int> FallbackOps() const { return ops_; }

 protected:
  Unit(std::string step, std::vector<int> ops, std::set<std::string> reads, std::set<std::string> writes);
  void AddOps(const std::vector<int>& ops);
  std::set<std::string> reads_, writes_;

 private:
  std::string step_;
  std::vector<int> ops_;
};

using Units = std::vector<std::unique_ptr<Unit>>;

// An op no step has claimed yet.
class PendingOp final : public Unit {
 public:
  PendingOp(const Cluster& c, int op);
  const char* kind() const override { return "pending"; }
  int op() const { return ops().front(); }
  std::string Describe(const Cluster&) const override { return "not lowered yet"; }
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
};

// The op of a pending unit, or -1 for any other kind.
int PendingOpOf(const Unit& unit);
// Whether an op of `unit` is kept out of `step` (Cluster::Excluded: a unit
// that step made could not be compiled).
bool AnyOpExcluded(const Cluster& c, std::string_view step, const Unit& unit);
// The unit holding each op (-1 when none does).
std::vector<int> UnitOfOps(const Cluster& c, const Units& units);

// One op (or a variant of it: `desc` replaces the op's desc, e.g. without a
// gradient another unit computes) through a framework kernel on views of the
// bound buffers: the oneDNN kernel where the op has one (an anchor), or the
// reference kernel.
class OneDnnOpUnit final : public Unit {
 public:
  struct Operands {
    // The variant's desc; null: the op's own.
    std::shared_ptr<const proto::OpDesc> desc;
    // The derived buffers the variant reads (its desc names them by
    // DerivedBuffer::Name()), e.g. the old W of sgd_before_dx's dX.
    std::vector<DerivedBuffer> derived_inputs;
  };
  OneDnnOpUnit(const std::string& step, const Cluster& c, int op, Operands operands = {});
  const char* kind() const override { return "onednn_op"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
  const proto::OpDesc& desc(const Cluster& c) const { return o_.desc ? *o_.desc : c.op(ops().front()); }
  const std::vector<DerivedBuffer>& derived_inputs() const { return o_.derived_inputs; }

 private:
  Operands o_;
};

class FrameworkOpUnit final : public Unit {
 public:
  FrameworkOpUnit(const std::string& step, const Cluster& c, int op);
  const char* kind() const override { return "framework_op"; }
  std::string Describe(const Cluster& c) const override;
  std::vector<EmittedKernel> Emit(EmitContext& ctx) const override;
};

// Which units read and write each var, by position in `units` (null entries,
// which a step leaves until it compacts, are skipped).
class VarUses {
 public:
  explicit VarUses(const Units& units);
  // Positions of the units that read (write) `var`, ascending; empty when none.
  const std::vector<int>& Readers(const std::string& var) const { return Find(readers_, var); }
  const std::vector<int>& Writers(const std::string& var) const { return Find(writers_, var); }
  // Forgets the unit at `u` (a step is about to reset it): as if built
  // without it.
  void Remove(int u, const Unit& unit);
  // NothingBetweenTouches (below) over the units indexed, by looking up the
  // vars instead of scanning the positions between.
  bool NothingBetweenTouches(int from, int to, const std::set<std::string>& reads, const std::set<std::string>& writes,
                             const std::set<int>& fused = {}) const;

 private:
  static const std::vector<int>& Find(const std::map<std::string, std::vector<int>>& m, const std::string& var);
  std::map<std::string, std::vector<int>> readers_, writers_;
};

// The single consumer of the value op `i` writes into `var`, when the value
// is needed by nothing else (not a cluster output), the consumer is still
// pending, is not excluded from `step` and has one of `types`; else -1.
int OnlyPendingConsumer(const Cluster& c, const Units& units, const std::vector<int>& unit_of, int i,
                        const std::string& var, std::string_view step, std::initializer_list<const char*> types);

// Checks a fusion that runs units [from, to] (positions) at `from`: true when
// no unit strictly between them, other than those at the positions in
// `fused` (the fusion's own), writes a var in `reads` or reads or writes a
// var in `writes`.
bool NothingBetweenTouches(const Units& units, int from, int to, const std::set<std::string>& reads,
                           const std::set<std::string>& writes, const std::set<int>& fused = {});

// "#3 matmul, #4 elementwise_add": the ops of a unit, for lowering.txt.
std::string OpList(const Cluster& c, const std::vector<int>& ops);

// Removes the null entries a step left where it took units away.
void Compact(Units* units);

}  // namespace kiln::jit
