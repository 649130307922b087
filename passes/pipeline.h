// The production pass pipeline: the one place that says which passes run on
// a program, in which order, and how (kiln train, run, dump and bench all
// transform their programs through RunPipeline).
//
// BuildPipeline lists the passes the options turn on, in this order (see the
// comment at each entry in pipeline.cc):
//   decomposition_fusion_pass  exported LayerNorm / erf GELU -> layer_norm, gelu
//   attention_fusion_pass  fuses attention and its grad ops (with build_jit)
//   recompute_pass   copies cheap forward ops into the backward pass
//   build_jit_pass   replaces clusters by jit_launch ops
//   inplace_pass     lets the framework ops left outside clusters run in place
// TransformProgram runs a list over block 0 of a program: one ir::Graph built
// once, every pass through RunPasses (which verifies the graph after each
// pass and names the pass that broke it), one conversion back. Passes never
// read flags: tools/pipeline_setup.h fills the options from them.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "framework/op_registry.h"
#include "framework/proto/framework.pb.h"
#include "passes/pass.h"
#include "passes/pass_registry.h"

namespace kiln {

struct PipelineOptions {
  // Which passes run. fuse_attention takes effect only with build_jit.
  bool fuse_decompositions = false;
  bool fuse_attention = false;
  bool recompute = false;
  bool build_jit = false;
  bool inplace = false;
  // Each pass's options, build_jit_pass's subgraph sink (required with
  // build_jit) and the reports to fill (each optional; reset to empty when
  // its pass does not run).
  PassConfig config;
  // Feeds and fetch targets: added to every pass's keep_vars.
  std::set<std::string> keep_vars;
  // When not empty: the program as protobuf text before the first pass and
  // after each pass that runs, DIR/00_input.pbtxt, DIR/01_<pass name>.pbtxt,
  // ... (see TransformProgram).
  std::string dump_dir;
};

// The passes `options` turns on, in pipeline order. Throws InvalidArgument for
// bad pass options (unknown op types, ...) and for build_jit without a sink.
// The passes write to the reports in options.config; `registry` must outlive
// them.
std::vector<std::unique_ptr<Pass>> BuildPipeline(const PipelineOptions& options,
                                                 const OpRegistry& registry = OpRegistry::Global());

// BuildPipeline, then TransformProgram with options.dump_dir. With no pass
// on, returns `program` unchanged (after writing 00_input.pbtxt when dumping).
proto::ProgramDesc RunPipeline(const proto::ProgramDesc& program, const PipelineOptions& options,
                               const OpRegistry& registry = OpRegistry::Global());

// Runs `passes` in order over one ir::Graph of block 0 and returns the
// program with block 0 rewritten (other blocks as they were). With a
// `dump_dir`, first creates it (CreateDumpDir), then writes the program as
// protobuf text before the first pass (00_input.pbtxt) and after pass k
// (<k>_<name>.pbtxt, k two digits from 01). Throws InvalidArgument for a
// program without blocks; kiln::Error (kInternal) naming the pass after which
// the graph no longer verifies; errors from the passes propagate.
proto::ProgramDesc TransformProgram(const proto::ProgramDesc& program, const std::vector<std::unique_ptr<Pass>>& passes,
                                    const std::string& dump_dir = "");

// Creates `dir` (and its parents) unless it exists. Throws InvalidArgument
// naming it when it cannot be created or is not a writable directory.
void CreateDumpDir(const std::string& dir);

}  // namespace kiln
