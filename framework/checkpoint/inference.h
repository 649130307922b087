// An inference program from a training run's forward program: only the ops
// the fetch targets need, given the feeds and the parameters; dropout and
// batch_norm switched to inference (is_test). `kiln export` writes it with
// its parameters; `kiln predict` runs it.
#pragma once

#include <string>
#include <vector>

#include "framework/proto/framework.pb.h"
#include "framework/scope.h"

namespace kiln {

// Keeps the ops of block 0 that the `fetches` depend on, and the vars they
// touch. Every var a kept op reads must be a feed, a persistable var or made
// by a kept op: otherwise InvalidArgument names the var and the fetch that
// needs it. Unknown feeds or fetches are errors too.
proto::ProgramDesc PruneForInference(const proto::ProgramDesc& forward, const std::vector<std::string>& feeds,
                                     const std::vector<std::string>& fetches);

// Sets is_test = true on every op that has the attribute (dropout,
// batch_norm): the program then computes what it computes at inference.
void SetIsTest(proto::ProgramDesc* program);

// Paddle's clone(for_test=True): the forward ops of a training program with
// is_test set. Drops every op whose op_role is backward, optimize, lr_sched
// or recompute, and the vars only those ops touch; the forward ops stay in
// their order. Evaluating the result never changes a parameter. Throws
// InvalidArgument naming the op when an optimizer op carries no op_role (a
// program built before kiln marked roles): pruning it could not be trusted.
proto::ProgramDesc ForTestProgram(const proto::ProgramDesc& program);

// A model directory (kiln export, kiln.save_inference_model): written like a
// checkpoint (framework/checkpoint/checkpoint.h), with the parameters the
// pruned program reads as .npy files, the program as model.pbtxt and
// inference.json (each feed with its dtype and shape, the fetch targets), all
// listed with their sha256 in manifest.json.
struct InferenceModel {
  proto::ProgramDesc program;
  std::vector<std::string> feeds;
  std::vector<std::string> fetches;
};

// Prunes `forward` for the feeds and fetches and writes it with the
// persistable vars it reads (from `scope`) to `dir`, atomically. Returns what
// was written.
InferenceModel SaveInferenceModel(const std::string& dir, const proto::ProgramDesc& forward,
                                  const std::vector<std::string>& feeds, const std::vector<std::string>& fetches,
                                  const Scope& scope);

// Reads and verifies the model directory `dir` (anything else is an error
// naming it) and loads its parameters into `scope` (unchanged on error).
InferenceModel LoadInferenceModel(const std::string& dir, Scope* scope);

}  // namespace kiln
