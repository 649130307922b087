// What a run of a program must be fed: the vars its ops read before any op
// of the program writes them, other than persistable ones (parameters and
// optimizer state live in the scope between runs; everything else belongs
// to one run). Checked before a run starts, so a missing feed is named as
// such instead of an op failing on a var that "holds no data" (or, worse,
// reading a value a failed earlier run left in the scope).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "framework/proto/framework.pb.h"

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

}  // namespace kiln
