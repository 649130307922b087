// What `kiln dump` writes, for any program (the command line's dump of a
// model or program file, and kiln.dump from Python): the pass pipeline with
// build_jit_pass on, every cluster compiled for concrete shapes, and the
// files docs/dump.md describes.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "framework/proto/framework.pb.h"
#include "framework/tensor.h"
#include "tools/dump_graphs.h"

namespace kiln::tools {

// What to dump.
struct DumpSource {
  proto::ProgramDesc program;
  std::set<std::string> keep;  // feeds and fetch targets (kept by the passes)
  std::string description;     // how index.md names the program
  // Concrete dims of vars read before any op writes them (feeds); other such
  // vars get -1 replaced by `batch`.
  std::map<std::string, Dims> feed_dims;
  int64_t batch = 1;
  GraphLimits graphs;  // how big a graph is drawn op by op, and how long drawing may take
};

struct DumpResult {
  std::string explain;  // the short form of index.md (kiln train --jit_explain's text)
  size_t clusters = 0;  // cluster folders written
};

// What a program's user feeds and fetches, as far as the program says: vars
// read before any op writes them that are not persistable, and vars written
// that no op reads.
std::set<std::string> ProgramFeedsAndResults(const proto::BlockDesc& block);

// Runs the pipeline the flags describe (--recompute, --use_inplace) with
// build_jit_pass on, compiles every cluster and writes the dump to `out_dir`
// (created when missing). Throws naming the var for a bad feed shape. The
// text files are written before any drawing starts; the drawings
// (program.svg, cluster_<id>/graph.svg, inlined in index.html) then take at
// most src.graphs.seconds, and a graph not drawn in time is named as such in
// index.html instead.
DumpResult WriteDump(const DumpSource& src, const std::string& out_dir);

}  // namespace kiln::tools
