// inplace_pass: lets an op write its output into its input's buffer when the
// input dies there (seed 000, the oneDNN in-place pass).
//
// Candidates are ops whose registry entry has an in-place pair (input slot ->
// output slot, OpInfo::inplace) and whose type is in op_types (by default
// OneDnnInplaceOps(): the kernels that run correctly with one buffer for src
// and dst). For the pair's first input arg X and its output arg Out, the op
// runs in place when
//   - X is written by an op of the block (so it is not fed), is not
//     persistable and not in keep_vars; the version the op reads is the
//     latest of its name and the op is its only reader, reading it once. So
//     no later op reads X: gelu_grad reads gelu's X, so a gelu followed by
//     its grad never runs in place, while relu_grad reads relu's Out and does
//     not stop relu;
//   - Out is declared, not persistable, not in keep_vars, and the op's write
//     is the only version of its name;
//   - X and Out have the same dtype and dims as declared (-1 matches only -1),
//     so an elementwise_add whose X is the broadcast side never qualifies.
// Then Out's var node is renamed to X's name, as the version after the one
// the op reads: the op reads and writes one variable (the executor hands its
// kernel one tensor for both), every reader of Out reads X, and Out's name
// leaves the block. Ops are visited in topological order, so a chain such as
// matmul -> elementwise_add -> relu collapses onto the matmul's output.
//
// Ordering: run after build_jit_pass. Ops inside clusters belong to the
// compiler, whose arena plan reuses their buffers already; renaming vars
// inside a cluster would change its stored subgraph. This pass sees the
// framework ops left outside and the jit_launch ops' arguments (jit_launch
// itself is never a candidate). Never changes topology.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "framework/data_type.h"
#include "framework/op_registry.h"
#include "framework/tensor.h"
#include "passes/pass.h"

namespace kiln {

struct InplacePassOptions {
  // Feeds and fetch targets: never renamed, never overwritten.
  std::set<std::string> keep_vars;
  // Op types allowed to run in place; empty means OneDnnInplaceOps().
  std::vector<std::string> op_types;
};

// Why a candidate op was not made in place.
enum class InplaceSkip {
  kNotWritten,      // X has no producer in the block (fed, or an input of the program)
  kPersistable,     // X or Out is persistable
  kKept,            // X or Out is a feed or fetch target
  kReadLater,       // another op reads X's version, or the op reads it twice
  kRewritten,       // X's name is written again after the version the op reads
  kOutputVersions,  // Out's name is written by another op too
  kShapeMismatch,   // X and Out differ in dtype or declared dims
  kUndeclared,      // X or Out is not declared in the block
};
// "not_written", "persistable", "kept", "read_later", "rewritten",
// "output_versions", "shape_mismatch", "undeclared".
const char* InplaceSkipName(InplaceSkip reason);

struct InplaceReport {
  struct Renamed {
    std::string op;  // op label (graph.OpLabel)
    std::string type;
    std::string input;   // X's name: the var the op now reads and writes
    std::string output;  // Out's former name
    DataType dtype = DataType::kFP32;
    Dims dims;  // declared; -1 for the batch dim
  };
  struct Skipped {
    std::string op;
    std::string type;
    InplaceSkip reason;
    std::string detail;
  };
  std::vector<Renamed> renamed;  // topological order
  std::vector<Skipped> skipped;  // every candidate left alone, topological order

  // Bytes of the renamed outputs: the buffers one run of the program no
  // longer allocates. A -1 dim counts as `batch`.
  size_t SavedBytes(int64_t batch) const;
  // One line per renamed op and per skipped candidate.
  std::string ToString() const;
};

class InplacePass : public Pass {
 public:
  // Throws InvalidArgument for an op type in op_types that `registry` does
  // not know. When `report` is not null every Run overwrites it. `registry`
  // must outlive the pass.
  explicit InplacePass(InplacePassOptions options, InplaceReport* report = nullptr,
                       const OpRegistry& registry = OpRegistry::Global());

  std::string_view name() const override { return "inplace_pass"; }
  bool Run(ir::Graph& graph) const override;
  bool Run(ir::Graph& graph, InplaceReport* report) const;

  const InplacePassOptions& options() const { return options_; }

 private:
  InplacePassOptions options_;
  std::set<std::string, std::less<>> op_types_;
  InplaceReport* report_;
  const OpRegistry& registry_;
};

}  // namespace kiln
