#include "framework/feed_check.h"

#include "framework/error.h"
#include "framework/op_desc.h"
#include "framework/validate.h"

namespace kiln {

std::vector<std::string> RequiredFeeds(const proto::BlockDesc& block) {
  std::set<std::string> written, listed;
  std::vector<std::string> out;
  for (const auto& op : block.ops()) {
    for (const auto& a : AllInputArgs(op)) {
      if (a == kEmptyVarName || written.count(a) || listed.count(a)) continue;
      const proto::VarDesc* v = FindVarDesc(block, a);
      if (v != nullptr && v->persistable()) continue;
      listed.insert(a);
      out.push_back(a);
    }
    for (const auto& a : AllOutputArgs(op)) written.insert(a);
  }
  return out;
}

void CheckFeeds(const proto::BlockDesc& block, const std::set<std::string>& fed, const std::string& flag) {
  CheckFeeds(RequiredFeeds(block), fed, flag);
}

void CheckFeeds(const std::vector<std::string>& required, const std::set<std::string>& fed, const std::string& flag) {
  for (const auto& name : required) {
    if (fed.count(name)) continue;
    if (flag.empty()) ThrowInvalidArgument("feed '", name, "' is missing (the program reads it)");
    ThrowInvalidArgument("feed '", name, "' is missing (the program reads it): give it with ", flag, " ", name,
                         "=FILE.npy");
  }
}

void CheckFeedShapes(const proto::BlockDesc& block, const std::map<std::string, Dims>& fed) {
  // Fed and persistable vars keep their (run-time) dims; every other var is
  // declared afresh by shape inference, op by op, so concrete dims flow on.
  proto::BlockDesc b = block;
  b.clear_vars();
  for (const auto& v : block.vars()) {
    auto it = fed.find(v.name());
    if (it == fed.end() && !v.persistable()) continue;
    proto::VarDesc* nv = b.add_vars();
    *nv = v;
    if (it == fed.end()) continue;
    nv->clear_dims();
    for (int64_t d : it->second) nv->add_dims(d);
  }
  BlockVarIndex index(&b);
  for (int i = 0; i < b.ops_size(); ++i) {
    try {
      InferShapeAtBuild(&b, i, /*declare_outputs=*/true, OpRegistry::Global(), &index);
    } catch (const Error& e) {
      // Only an op's verdict on the shapes is the feeds' fault.
      if (e.code() == ErrorCode::kInvalidArgument) throw;
      return;
    }
  }
}

FedVars::~FedVars() {
  for (const auto& name : names_) {
    if (Variable* v = scope_.FindVar(name)) v->GetMutable()->Clear();
  }
}

}  // namespace kiln
