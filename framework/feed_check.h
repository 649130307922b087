// What a run of a program must be fed: the vars its ops read before any op
// of the program writes them, other than persistable ones (parameters and
// optimizer state live in the scope between runs; everything else belongs
// to one run). Checked before a run starts, so a missing feed is named as
// such instead of an op failing on a var that "holds no data" (or, worse,
// reading a value a failed earlier run left in the scope).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "framework/proto/framework.pb.h"
#include "framework/scope.h"

namespace kiln {

// In the order the ops first read them.
std::vector<std::string> RequiredFeeds(const proto::BlockDesc& block);

// Throws InvalidArgument "feed 'label' is missing (the program reads it)"
// for the first required feed not in `fed`. With `flag` (a command line's
// feeding flag, "--feed") it goes on ": give it with --feed label=FILE.npy".
void CheckFeeds(const proto::BlockDesc& block, const std::set<std::string>& fed, const std::string& flag = "");
// The same over RequiredFeeds' result.
void CheckFeeds(const std::vector<std::string>& required, const std::set<std::string>& fed,
                const std::string& flag = "");

// Shape inference over the whole block with the fed vars at their run-time
// dims (`fed`; the others as declared): throws InvalidArgument naming the
// op by its place in the program when the feeds do not fit each other (x of
// 16 rows, labels of 32), before anything runs or compiles. With the JIT on,
// only the cluster that reads both would see the mismatch, after the
// clusters before it compiled for the bad feed.
void CheckFeedShapes(const proto::BlockDesc& block, const std::map<std::string, Dims>& fed);

// The non-persistable vars one run feeds: cleared from the scope when the
// run ends, whether it succeeded or raised, so that a feed of a failed run
// never stands in for a missing one.
class FedVars {
 public:
  explicit FedVars(Scope& scope) : scope_(scope) {}
  FedVars(const FedVars&) = delete;
  FedVars& operator=(const FedVars&) = delete;
  ~FedVars();
  void Add(const std::string& name) { names_.insert(name); }
  const std::set<std::string>& names() const { return names_; }

 private:
  Scope& scope_;
  std::set<std::string> names_;
};

}  // namespace kiln
