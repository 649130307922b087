#include "framework/distributed/data_parallel.h"

#include <algorithm>
#include <map>
#include <set>

#include "framework/op_desc.h"
#include "framework/op_registry.h"

namespace kiln {
namespace {

bool IsCollective(const std::string& type) { return type.rfind("c_allreduce", 0) == 0; }

// Each gradient an optimizer op reads (its Grad slot), with the index of the
// op that writes it last before that update.
struct Grad {
  std::string var;
  int ready_after = -1;
  int64_t bytes = 0;
};

std::vector<Grad> GradsOfUpdates(const proto::BlockDesc& block) {
  std::map<std::string, int> last_write;
  std::vector<Grad> grads;
  std::set<std::string> seen;
  for (int i = 0; i < block.ops_size(); ++i) {
    const proto::OpDesc& op = block.ops(i);
    const bool update = IsParameterUpdate(op);
    for (const std::string& g : update ? InputArgs(op, "Grad") : std::vector<std::string>{}) {
      if (seen.count(g) || !last_write.count(g)) continue;
      const proto::VarDesc* v = FindVarDesc(block, g);
      if (v == nullptr || FromProto(v->dtype()) != DataType::kFP32) continue;
      seen.insert(g);
      grads.push_back({g, last_write[g], Numel(VarDims(*v)) * 4});
    }
    for (const std::string& out : OutputVars(op)) last_write[out] = i;
  }
  return grads;
}

}  // namespace

std::string DataParallelReport::ToString() const {
  std::string out;
  for (const Bucket& b : buckets) {
    out += b.name + ": " + std::to_string(b.grads.size()) + " gradients, " + std::to_string(b.bytes) +
           " bytes, started after op #" + std::to_string(b.start_after) + ":";
    for (const auto& g : b.grads) out += " " + g;
    out += "\n";
  }
  return out;
}

DataParallelReport AppendDataParallel(proto::ProgramDesc* program, const DataParallelOptions& options) {
  proto::BlockDesc* block = program->mutable_blocks(0);
  for (const auto& op : block->ops()) {
    if (IsCollective(op.type())) ThrowInvalidArgument("data parallel: the program already averages gradients (", op.type(), ")");
  }
  std::vector<Grad> grads = GradsOfUpdates(*block);
  if (grads.empty()) ThrowInvalidArgument("data parallel: no optimizer op reads a gradient the program computes");
  std::stable_sort(grads.begin(), grads.end(), [](const Grad& a, const Grad& b) { return a.ready_after < b.ready_after; });

  // Buckets in the order the gradients are ready.
  DataParallelReport report;
  for (const Grad& g : grads) {
    if (report.buckets.empty() || report.buckets.back().bytes + g.bytes > options.bucket_bytes) {
      report.buckets.push_back({"dp_bucket_" + std::to_string(report.buckets.size()), {}, 0, -1});
    }
    report.buckets.back().grads.push_back(g.var);
    report.buckets.back().bytes += g.bytes;
    report.buckets.back().start_after = g.ready_after;
  }

  // Rebuild the op list: a bucket's start after its last gradient's writer,
  // its wait before the first later reader of any of its gradients.
  std::map<int, std::vector<const DataParallelReport::Bucket*>> starts_after;
  for (const auto& b : report.buckets) starts_after[b.start_after].push_back(&b);
  std::vector<proto::OpDesc> ops(block->ops().begin(), block->ops().end());
  std::vector<proto::OpDesc> out;
  std::vector<const DataParallelReport::Bucket*> open;  // started, not yet waited for
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    for (auto it = open.begin(); it != open.end();) {
      const std::vector<std::string> reads = InputVars(ops[i]);
      const bool reads_bucket = std::any_of((*it)->grads.begin(), (*it)->grads.end(), [&reads](const std::string& g) {
        return std::find(reads.begin(), reads.end(), g) != reads.end();
      });
      if (!reads_bucket) {
        ++it;
        continue;
      }
      out.push_back(OpBuilder("c_allreduce_wait")
                        .In("X", (*it)->grads)
                        .In("Handle", {(*it)->name + ".handle"})
                        .Out("Out", (*it)->grads)
                        .Attr("bucket", (*it)->name)
                        .Attr(kOpRoleAttr, std::string(kOpRoleBackward))
                        .Build());
      it = open.erase(it);
    }
    out.push_back(ops[i]);
    for (const auto* b : starts_after[i]) {
      out.push_back(
          OpBuilder("c_allreduce_start")
              .In("X", b->grads)
              .Out("Handle", {b->name + ".handle"})
              .Attr("bucket", b->name)
              .Attr(kOpRoleAttr, std::string(kOpRoleBackward))
              .Build());
      open.push_back(b);
    }
  }
  KILN_CHECK(open.empty(), "data parallel: a bucket without a reader after its start");
  block->clear_ops();
  for (auto& op : out) *block->add_ops() = std::move(op);
  for (auto& b : report.buckets) {
    proto::VarDesc* h = block->add_vars();
    h->set_name(b.name + ".handle");
    h->set_dtype(ToProto(DataType::kINT64));
    h->add_dims(1);
  }
  // Positions in the new program, for the report.
  for (auto& b : report.buckets) {
    for (int i = 0; i < block->ops_size(); ++i) {
      const proto::OpDesc& op = block->ops(i);
      if (op.type() == "c_allreduce_start" && FindAttr(op, "bucket")->s() == b.name) b.start_after = i - 1;
    }
  }
  return report;
}

}  // namespace kiln
