// The cluster as the lowering steps see it: its ops with the concrete shapes
// of one signature, an ir::Graph over them (steps match patterns on its
// producer and consumer edges), and constant-time lookups of vars and ops.
// Built once per compile; the steps only read it.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/compiled_object.h"
#include "framework/ew/ew_fragment.h"
#include "framework/ir/graph.h"
#include "framework/jit_subgraph.h"
#include "framework/op_registry.h"

namespace kiln::jit {

// The subgraph's block with every var's dims made concrete for `signature`.
// Throws InvalidArgument when shape inference fails.
proto::BlockDesc InferConcreteShapes(const JitSubgraph& subgraph, const ShapeSignature& signature,
                                     const OpRegistry& registry = OpRegistry::Global());

class Cluster {
 public:
  // Throws InvalidArgument (shape inference) naming the op and what failed.
  Cluster(const JitSubgraph& subgraph, const ShapeSignature& signature, const CompileOptions& options,
          const OpRegistry& registry);
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  const JitSubgraph& subgraph() const { return subgraph_; }
  const CompileOptions& options() const { return options_; }
  const OpRegistry& registry() const { return registry_; }
  // Concrete dims; ops in a valid execution order (the subgraph's).
  const proto::BlockDesc& block() const { return block_; }
  const ir::Graph& graph() const { return graph_; }

  // ---- Ops, by index in block() --------------------------------------------
  int num_ops() const { return block_.ops_size(); }
  const proto::OpDesc& op(int i) const { return block_.ops(i); }
  const std::string& type(int i) const { return block_.ops(i).type(); }
  const OpInfo& info(int i) const { return *ops_[i].info; }
  const AttrMap& attrs(int i) const { return ops_[i].attrs; }
  template <typename T>
  const T& Attr(int i, const std::string& name) const {
    return std::get<T>(ops_[i].attrs.at(name));
  }
  // "op #3 'matmul'" (the index in the cluster).
  std::string OpLabel(int i) const;
  // The single arg of a slot; "" when the slot is absent or @EMPTY@.
  std::string In(int i, std::string_view slot) const;
  std::string Out(int i, std::string_view slot) const;

  // ---- Edges ---------------------------------------------------------------
  // Ops of the cluster that read, as data (not shape-only), the value op `i`
  // writes into `var`; ascending.
  std::vector<int> Consumers(int i, const std::string& var) const;
  // The op of the cluster that wrote the value op `i` reads as `var`, or -1
  // when it comes from outside the cluster.
  int Producer(int i, const std::string& var) const;
  // Ops of the cluster that read, as data, the value op `i` reads as `var`
  // (op `i` among them when it does); ascending.
  std::vector<int> Readers(int i, const std::string& var) const;
  // True when the value op `i` reads as `var` is not the last: the name is
  // written again in the cluster (by op `i` itself in place, or later).
  bool RewrittenAfter(int i, const std::string& var) const;

  // True when the value op `i` writes into `var` is the name's last version.
  bool IsLastWrite(int i, const std::string& var) const;
  // True when an op other than `i` writes `var` after the value op `i` reads.
  bool WrittenLaterByOthers(int i, const std::string& var) const;

  // ---- Vars ----------------------------------------------------------------
  const proto::VarDesc& var(const std::string& name) const;  // KILN_CHECK: known
  bool HasVar(const std::string& name) const { return vars_.count(name) > 0; }
  Dims dims(const std::string& name) const { return VarDims(var(name)); }
  bool IsF32(const std::string& name) const { return var(name).dtype() == proto::FP32; }
  bool IsInput(const std::string& name) const { return inputs_.count(name) > 0; }
  // Needed after the cluster (read outside, fetched or persistable).
  bool IsOutput(const std::string& name) const { return outputs_.count(name) > 0; }
  // An input whose value dies in the cluster (JitSubgraph::donatable_inputs).
  bool IsDonatable(const std::string& name) const { return donatable_.count(name) > 0; }

  // ---- What ops compute ------------------------------------------------------
  // The op's elementwise fragments (its registry entry's meaning) when every
  // arg is f32 or bool and elementwise fusion is on; else none.
  const std::vector<EwFragment>& fragments(int i) const { return ops_[i].fragments; }
  // Vars op `i` reads as data: its fragments' reads, else its input args
  // without the shape-only ones. And the vars it writes.
  const std::set<std::string>& reads(int i) const { return ops_[i].reads; }
  // Input args op `i` reads only for their dims (its no-need-buffer vars).
  const std::set<std::string>& shape_only(int i) const { return ops_[i].shape_only; }
  // True when no cluster output depends on what op `i` computes: walking
  // back from the last op, an op is live when it writes a var that a later
  // live op reads as data (by its op contract: its input args without the
  // shape-only ones) or that leaves the cluster. An op that writes nothing is
  // live. The edge queries above leave dead ops out; the dead_ops step drops
  // them.
  bool dead(int i) const { return ops_[i].dead; }
  const std::set<std::string>& writes(int i) const { return ops_[i].writes; }

  // ---- Per-unit fallback ---------------------------------------------------
  // Ops a step must leave alone because a unit it made of them could not be
  // compiled (the driver retries the steps without them).
  bool Excluded(std::string_view step, int i) const;
  void Exclude(const std::string& step, int i) { excluded_.insert({step, i}); }

 private:
  struct OpFacts {
    const OpInfo* info = nullptr;
    AttrMap attrs;
    ir::NodeId node = ir::kNoNode;
    std::vector<EwFragment> fragments;
    std::set<std::string> reads, writes;
    std::set<std::string> shape_only;  // inputs read only for their dims
    bool dead = false;
  };
  void FindDeadOps();
  // The var node op `i` reads (writes) as `var`.
  ir::NodeId InputNode(int i, const std::string& var) const;
  ir::NodeId OutputNode(int i, const std::string& var) const;
  std::vector<int> DataReaders(ir::NodeId v, const std::string& var) const;

  const JitSubgraph& subgraph_;
  CompileOptions options_;
  const OpRegistry& registry_;
  proto::BlockDesc block_;
  ir::Graph graph_;
  std::vector<OpFacts> ops_;
  std::unordered_map<ir::NodeId, int> op_of_node_;
  std::unordered_map<std::string, const proto::VarDesc*> vars_;
  std::unordered_set<std::string> inputs_, outputs_, donatable_;
  std::set<std::pair<std::string, int>> excluded_;
};

}  // namespace kiln::jit
