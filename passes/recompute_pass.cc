#include "passes/recompute_pass.h"

#include <algorithm>
#include <map>

#include "framework/op_desc.h"
#include "framework/validate.h"

namespace kiln {
namespace {

constexpr const char* kSuffix = "@RECOMPUTE";

std::vector<std::string> Args(const google::protobuf::RepeatedPtrField<proto::OpDesc::Slot>& slots) {
  std::vector<std::string> out;
  for (const auto& s : slots) {
    for (const auto& a : s.args()) {
      if (a != kEmptyVarName) out.push_back(a);
    }
  }
  return out;
}

class Planner {
 public:
  Planner(const proto::BlockDesc& block, const RecomputePassOptions& options, const OpRegistry& registry)
      : block_(block), options_(options) {
    for (int i = 0; i < block.ops_size(); ++i) {
      const proto::OpDesc& op = block.ops(i);
      for (const auto& a : Args(op.outputs())) {
        writers_[a].push_back(i);
        if (bwd_start_ < 0 && a.find("@GRAD") != std::string::npos) bwd_start_ = i;
      }
    }
    for (int i = 0; i < block.ops_size(); ++i) {
      const proto::OpDesc& op = block.ops(i);
      const OpInfo* info = registry.Find(op.type());
      const std::set<std::string> shape_only =
          info != nullptr ? NoNeedBufferVars(*info, op) : std::set<std::string>{};
      for (const auto& a : Args(op.inputs())) {
        readers_[a].push_back(i);
        if (bwd_start_ >= 0 && i >= bwd_start_ && !shape_only.count(a)) bwd_data_readers_[a].push_back(i);
      }
    }
  }

  int bwd_start() const { return bwd_start_; }

  // Vars to recompute and their chains, in forward order.
  struct Chain {
    std::vector<int> ops;                 // forward op indices, producers first
    std::vector<std::string> renamed;     // chain outputs the backward reads
    int insert_before = 0;                // first backward reader of any of them
    int64_t saved = 0, transient = 0;     // bytes per sample
  };
  std::vector<Chain> Plan() {
    std::vector<Chain> chains;
    if (bwd_start_ < 0) return chains;
    for (int i = 0; i < bwd_start_; ++i) {
      for (const auto& v : Args(block_.ops(i).outputs())) {
        if (!Candidate(v)) continue;
        Chain c;
        if (!Extend(v, 0, &c.ops)) continue;
        std::set<std::string> leaves;
        for (int p : c.ops) {
          for (const auto& a : Args(block_.ops(p).outputs())) {
            if (bwd_data_readers_.count(a)) {
              c.renamed.push_back(a);
              c.saved += Bytes(a);
            } else {
              c.transient += Bytes(a);
            }
          }
          for (const auto& a : Args(block_.ops(p).inputs())) {
            if (!InChain(c, a)) leaves.insert(a);
          }
        }
        // Worth it only when it keeps at least as many bytes out of the
        // forward-to-backward window as the copies make in passing.
        if (c.saved < c.transient || c.saved == 0) continue;
        c.insert_before = block_.ops_size();
        for (const auto& r : c.renamed) {
          if (keep(r)) c.saved = -1;
          c.insert_before = std::min(c.insert_before, bwd_data_readers_[r].front());
        }
        if (c.saved < 0) continue;
        for (const auto& r : c.renamed) recomputed_.insert(r);
        pinned_.insert(leaves.begin(), leaves.end());
        chains.push_back(std::move(c));
      }
    }
    return chains;
  }

 private:
  bool keep(const std::string& v) const {
    const proto::VarDesc* d = FindVarDesc(block_, v);
    return options_.keep_vars.count(v) > 0 || d == nullptr || d->persistable();
  }
  bool Candidate(const std::string& v) const {
    return !keep(v) && bwd_data_readers_.count(v) > 0 && !pinned_.count(v) && !recomputed_.count(v);
  }
  // Kept until the backward pass anyway: a chain may read it.
  bool Anchor(const std::string& v) const {
    const proto::VarDesc* d = FindVarDesc(block_, v);
    if (d != nullptr && d->persistable()) return true;
    if (!writers_.count(v)) return true;  // fed
    return bwd_data_readers_.count(v) > 0 && !recomputed_.count(v);
  }
  bool InChain(const Chain& c, const std::string& v) const {
    for (int p : c.ops) {
      for (const auto& a : Args(block_.ops(p).outputs())) {
        if (a == v) return true;
      }
    }
    return false;
  }
  int64_t Bytes(const std::string& v) const {
    const proto::VarDesc* d = FindVarDesc(block_, v);
    if (d == nullptr) return 0;
    int64_t n = SizeOf(FromProto(d->dtype()));
    for (int64_t x : d->dims()) n *= x < 0 ? 1 : x;
    return n;
  }
  // Appends the ops computing v (producers first); false when it cannot be
  // recomputed from anchors within max_chain ops.
  bool Extend(const std::string& v, int depth, std::vector<int>* ops) const {
    auto w = writers_.find(v);
    if (w == writers_.end() || w->second.size() != 1) return false;
    const int p = w->second.front();
    if (p >= bwd_start_ || depth >= options_.max_chain) return false;
    const proto::OpDesc& op = block_.ops(p);
    if (!options_.op_types.count(op.type())) return false;
    for (const auto& out : Args(op.outputs())) {
      if (writers_.at(out).size() != 1 || keep(out)) return false;
    }
    for (const auto& in : Args(op.inputs())) {
      if (Anchor(in)) continue;
      // An intermediate only this op reads (the scores before softmax).
      auto r = readers_.find(in);
      if (r == readers_.end() || r->second != std::vector<int>{p}) return false;
      if (!Extend(in, depth + 1, ops)) return false;
    }
    if (std::find(ops->begin(), ops->end(), p) == ops->end()) ops->push_back(p);
    return true;
  }

  const proto::BlockDesc& block_;
  const RecomputePassOptions& options_;
  int bwd_start_ = -1;
  std::map<std::string, std::vector<int>> writers_, readers_, bwd_data_readers_;
  std::set<std::string> pinned_, recomputed_;
};

}  // namespace

std::string RecomputeReport::ToString() const {
  if (vars.empty()) return "recomputed nothing";
  std::string s = "recomputed";
  for (size_t i = 0; i < vars.size(); ++i) {
    s += (i ? ", " : " ") + vars[i].name + " (";
    for (size_t k = 0; k < vars[i].op_types.size(); ++k) s += (k ? ", " : "") + vars[i].op_types[k];
    s += ")";
  }
  return s;
}

bool RecomputePass(proto::ProgramDesc* program, const RecomputePassOptions& options, RecomputeReport* report,
                   const OpRegistry& registry) {
  if (report != nullptr) *report = RecomputeReport{};
  if (program->blocks_size() == 0) return false;
  proto::BlockDesc* block = program->mutable_blocks(0);
  Planner planner(*block, options, registry);
  const auto chains = planner.Plan();
  if (chains.empty()) return false;

  std::map<int, std::vector<proto::OpDesc>> inserts;  // before op index
  // forward var -> (its copy, first op index reading the copy)
  std::map<std::string, std::pair<std::string, int>> rename;
  for (const auto& c : chains) {
    std::map<std::string, std::string> local;  // every output of the chain
    for (int p : c.ops) {
      for (const auto& a : Args(block->ops(p).outputs())) local[a] = a + kSuffix;
    }
    for (int p : c.ops) {
      proto::OpDesc copy = block->ops(p);
      SetAttr(&copy, kOpRoleAttr, Attribute(std::string(kOpRoleRecompute)));
      for (auto& s : *copy.mutable_inputs()) {
        for (auto& a : *s.mutable_args()) {
          if (local.count(a)) a = local[a];
        }
      }
      for (auto& s : *copy.mutable_outputs()) {
        for (auto& a : *s.mutable_args()) {
          if (local.count(a)) a = local[a];
        }
      }
      inserts[c.insert_before].push_back(std::move(copy));
    }
    for (const auto& [from, to] : local) {
      const proto::VarDesc* v = FindVarDesc(*block, from);
      if (v == nullptr || FindVarDesc(*block, to) != nullptr) continue;
      proto::VarDesc nv = *v;
      nv.set_name(to);
      *block->add_vars() = nv;
    }
    for (const auto& r : c.renamed) rename[r] = {local[r], c.insert_before};
    if (report != nullptr) {
      RecomputeReport::Var rv;
      rv.name = c.renamed.front();
      for (int p : c.ops) rv.op_types.push_back(block->ops(p).type());
      rv.bytes_per_sample = c.saved;
      report->vars.push_back(std::move(rv));
    }
  }

  google::protobuf::RepeatedPtrField<proto::OpDesc> ops;
  for (int i = 0; i < block->ops_size(); ++i) {
    if (auto it = inserts.find(i); it != inserts.end()) {
      for (auto& op : it->second) *ops.Add() = std::move(op);
    }
    proto::OpDesc op = block->ops(i);
    if (i >= planner.bwd_start()) {
      for (auto& s : *op.mutable_inputs()) {
        for (auto& a : *s.mutable_args()) {
          // Shape readers before the copy keep the forward var (its dims).
          if (auto r = rename.find(a); r != rename.end() && i >= r->second.second) a = r->second.first;
        }
      }
    }
    *ops.Add() = std::move(op);
  }
  block->mutable_ops()->Swap(&ops);
  return true;
}

}  // namespace kiln
