// An inference program from a training run's forward program: only the ops
// the fetch targets need, given the feeds and the parameters; dropout and
// batch_norm switched to inference (is_test). `kiln export` writes it with
// its parameters; `kiln predict` runs it.
#pragma once

#include <string>
#include <vector>

#include "framework/proto/framework.pb.h"

namespace kiln {

// Keeps the ops of block 0 that the `fetches` depend on, and the vars they
// touch. Every var a kept op reads must be a feed, a persistable var or made
// by a kept op: otherwise InvalidArgument names the var and the fetch that
// needs it. Unknown feeds or fetches are errors too.
proto::ProgramDesc PruneForInference(const proto::ProgramDesc& forward, const std::vector<std::string>& feeds,
                                     const std::vector<std::string>& fetches);

}  // namespace kiln
