// ir::Graph: a block as a bipartite graph of op nodes and var nodes, the form
// passes work on. Built from a proto::BlockDesc and written back to one.
//
// Model
// - Nodes are ops or vars. Edges run var -> op (the op reads the var) and
//   op -> var (the op writes it); each edge is one argument of one slot, so
//   `matmul(x, x)` has two edges from x. An `@EMPTY@` argument has no edge and
//   no node; it keeps its position in the slot.
// - Var nodes are SSA-style versions of a named block var. A write to a name
//   that has already been read or written creates a new version node of that
//   name, so an in-place op (sgd: ParamOut is Param) reads version k and
//   writes version k+1 instead of forming a self-cycle, and a name written by
//   several ops gets one version per write. All versions of a name share one
//   VarDesc (the block declares the name once).
// - Ordering: besides data edges, an op that writes version k of a name runs
//   after the writer and the readers of the version before it (write after
//   read / write after write). These constraints are derived from the version
//   order, not stored as edges; TopologicalOrder() and OpDependencies()
//   include them.
// - NodeIds are stable: RemoveNode() detaches a node and marks it removed; its
//   id is never reused and other ids stay valid. Removed nodes are skipped by
//   every query. There is no in-place compaction: ToBlock() + FromBlock()
//   yields a dense graph.
//
// Errors: misuse by a pass (an id that is not a live node of the expected
// kind) is an internal invariant and fails a KILN_CHECK. Malformed blocks
// given to FromBlock() throw InvalidArgument. Verify() throws kiln::Error
// (kInternal) describing every broken invariant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "framework/proto/framework.pb.h"

namespace kiln::ir {

using NodeId = std::size_t;
// No node: an @EMPTY@ argument, a var without producer, a name not found.
inline constexpr NodeId kNoNode = static_cast<NodeId>(-1);

// The args of one op slot as var nodes, in order; kNoNode stands for @EMPTY@.
struct SlotNodes {
  std::string slot;
  std::vector<NodeId> vars;
};

class Graph {
 public:
  // An empty graph for block idx 0, parent_idx -1.
  Graph();
  ~Graph();
  Graph(const Graph& other);
  Graph& operator=(const Graph& other);
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;

  // One var node per VarDesc (version 0), one op node per OpDesc appended in
  // block order (see AppendOp for how args resolve). An arg naming no VarDesc
  // gets a var node flagged undeclared. Throws InvalidArgument for a name
  // declared twice or an op without a type.
  static Graph FromBlock(const proto::BlockDesc& block);

  // Writes the block back: ops in TopologicalOrder() (for an unchanged graph
  // the original order), their args named after the var nodes they connect;
  // VarDescs of declared names that still have a node, in original order,
  // new names after in creation order. Undeclared vars are not written.
  // Throws like TopologicalOrder() on a cycle.
  proto::BlockDesc ToBlock() const;

  // ---- Nodes -------------------------------------------------------------
  // False for removed nodes and ids never handed out.
  bool IsOp(NodeId n) const;
  bool IsVar(NodeId n) const;
  bool IsRemoved(NodeId n) const;
  // Live op (var) nodes in id order.
  std::vector<NodeId> OpNodes() const;
  std::vector<NodeId> VarNodes() const;
  // Live nodes; ids are below NodeCapacity().
  size_t NumNodes() const;
  size_t NodeCapacity() const;

  // Op node: input var nodes in slot order then arg order (@EMPTY@ skipped;
  // a var read twice appears twice). Var node: its producer op (none or one
  // in a valid graph).
  std::vector<NodeId> inputs(NodeId n) const;
  // Op node: output var nodes in slot and arg order. Var node: the ops
  // reading it, by OpOrder() then id, each once.
  std::vector<NodeId> outputs(NodeId n) const;

  // ---- Ops -----------------------------------------------------------------
  // The op's desc; slot args always hold the names of the connected var nodes.
  const proto::OpDesc& op(NodeId n) const;
  // For the type and attributes only: change slots with SetInputs/SetOutputs.
  proto::OpDesc* mutable_op(NodeId n);
  // One entry per arg of the slot (kNoNode for @EMPTY@); empty when absent.
  std::vector<NodeId> InputSlot(NodeId op, std::string_view slot) const;
  std::vector<NodeId> OutputSlot(NodeId op, std::string_view slot) const;
  // Tie-break key of TopologicalOrder(): the index in the source block for
  // ops from FromBlock(); see AddOpNode/ReplaceOps for new ops.
  int64_t OpOrder(NodeId op) const;
  // "op #3 'matmul'" for ops of the source block (as kiln::OpLabel), "new op
  // 'jit_launch' (node 17)" for ops added later.
  std::string OpLabel(NodeId op) const;

  // ---- Vars ----------------------------------------------------------------
  // The VarDesc of the var's name (shared by all its versions). For an
  // undeclared var: the name only.
  const proto::VarDesc& var(NodeId n) const;
  // Dims, dtype and flags; changes apply to every version of the name. Never
  // change the name here (use RenameVar). An undeclared var stays undeclared
  // (ToBlock does not write it).
  proto::VarDesc* mutable_var(NodeId n);
  const std::string& VarName(NodeId n) const;
  // Position among the live versions of its name (0 = oldest).
  int VarVersion(NodeId n) const;
  bool IsDeclared(NodeId n) const;
  // "f32[64,10]"; "?" for an undeclared var.
  std::string VarShapeString(NodeId n) const;
  // Latest live version of `name`, or kNoNode.
  NodeId FindVar(std::string_view name) const;
  // Live versions of `name`, oldest first.
  std::vector<NodeId> VarVersions(std::string_view name) const;
  NodeId Producer(NodeId var) const;  // kNoNode when none

  // ---- Edits ---------------------------------------------------------------
  // New declared var (version 0). The name must be new or have no live node.
  NodeId AddVarNode(const proto::VarDesc& desc);
  // New latest version of a name that has a VarDesc entry (declared or not).
  NodeId AddVarVersion(std::string_view name);
  // New op node: desc's type and attrs are kept, its slots are replaced by
  // `inputs` / `outputs`. OpOrder is one past the largest order handed out so
  // far, so among independent ops it sorts last.
  NodeId AddOpNode(proto::OpDesc desc, const std::vector<SlotNodes>& inputs,
                   const std::vector<SlotNodes>& outputs);
  // New op connected by name, as if appended to the end of the block: each
  // input arg reads the latest version of its name (a new undeclared var when
  // the name is unknown); each output arg writes the latest version when that
  // has neither producer nor reader, else a new version.
  NodeId AppendOp(proto::OpDesc desc);
  // Replace the args of one slot (the slot is added at the end when absent).
  void SetInputs(NodeId op, std::string_view slot, const std::vector<NodeId>& vars);
  void SetOutputs(NodeId op, std::string_view slot, const std::vector<NodeId>& vars);
  // Every arg of `op` that reads (writes) `from` now reads (writes) `to`.
  void ReplaceInput(NodeId op, NodeId from, NodeId to);
  void ReplaceOutput(NodeId op, NodeId from, NodeId to);
  // Gives var node `n` another name: it becomes the latest version of `name`,
  // or the version right after `after` (a var node of `name`) when given.
  // Ops connected to `n` follow. A new name takes a copy of the old VarDesc.
  void RenameVar(NodeId n, const std::string& name, NodeId after = kNoNode);
  // Detaches and removes a node. Args of ops that referenced a removed var
  // become @EMPTY@.
  void RemoveNode(NodeId n);
  // Replaces a group of ops by one new op (a fused op, a jit_launch): removes
  // the group, adds `desc` connected to `inputs` / `outputs` with the smallest
  // OpOrder of the group (so it takes the group's place in the block), then
  // removes var nodes adjacent to the group that are left without any edge
  // and are not persistable. Every var that outlives the group must be in
  // `outputs`.
  NodeId ReplaceOps(const std::vector<NodeId>& ops, proto::OpDesc desc, const std::vector<SlotNodes>& inputs,
                    const std::vector<SlotNodes>& outputs);

  // ---- Analysis ------------------------------------------------------------
  // Ops that must run before `op`: producers of its inputs and, for each var
  // it writes, the writer and readers of the previous version(s). Sorted by id.
  std::vector<NodeId> OpDependencies(NodeId op) const;
  // OpDependencies of every op at once, indexed by node id (empty for var
  // nodes and removed ids): one walk of the graph, where a call of
  // OpDependencies per op walks it once per op.
  std::vector<std::vector<NodeId>> AllOpDependencies() const;
  // All live op nodes, dependencies first; among ready ops the smallest
  // (OpOrder, id) goes first, so an unchanged graph keeps block order.
  // Throws kiln::Error (kInternal) naming ops of a cycle.
  std::vector<NodeId> TopologicalOrder() const;
  // Empty when valid, else one line per problem: an edge not joining an op
  // and a var, op args out of sync with edges, a var version with several
  // producers, a cycle (data or ordering).
  std::string VerifyMessage() const;
  // Throws kiln::Error (kInternal) with VerifyMessage() when not empty.
  void Verify() const;

  // Graphviz: ops as boxes labelled with their type, vars as ellipses
  // labelled "name\nf32[64,10]" (" (v1)" after the name for later versions;
  // persistable filled, undeclared dashed), edges labelled with the slot.
  // Deterministic: nodes and edges in id order.
  std::string ToDot(std::string_view graph_name = "kiln") const;
  // Readable IR (STYLE.md 6), one line per node, numbered in a stable
  // topological order shared by vars and ops:
  //   %0 = var "x" : f32[64,784]          var without producer ("param" when persistable)
  //   %3 = relu(%1) : f32[64,512]  # h    op with one output (the op takes %2)
  //   %9 = softmax_with_cross_entropy(%4, %1) -> (%10 : f32[64,10], %11 : f32[64,1])  # sm, loss
  //                                       any other number of outputs: the op's own number
  // Attributes follow the type in name order: matmul[transpose_Y=true](...).
  // @EMPTY@ prints as _. A cyclic graph prints with a "# cycle" first line.
  std::string Print() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::ir
