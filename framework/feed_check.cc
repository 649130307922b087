#include "framework/feed_check.h"

#include "framework/error.h"
#include "framework/op_desc.h"

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

}  // namespace kiln
