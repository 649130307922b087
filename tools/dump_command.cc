// kiln dump: runs the pass pipeline (with build_jit_pass always on) over a
// model's training program or a program file, compiles every cluster for the
// shapes of --batch_size and writes what was compiled to --out DIR (see
// docs/dump.md).
#include <cstdlib>
#include <map>
#include <set>

#include "framework/backward.h"
#include "framework/distributed/data_parallel.h"
#include "framework/file_util.h"
#include "framework/flags.h"
#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "framework/validate.h"
#include "tools/commands.h"
#include "tools/dump_writer.h"
#include "tools/jit_setup.h"
#include "tools/model_flags.h"
#include "tools/pipeline_setup.h"

namespace kiln::tools {
namespace {

// The program kiln dump works on (--program, else --model's training
// program), its feeds and fetch targets, and how index.md names it.
DumpSource LoadDumpSource() {
  DumpSource s;
  s.batch = FLAGS_batch_size;
  if (FLAGS_program.empty()) {
    const Model m = BuildModelFromFlags(DatasetFromFlags());
    s.program = m.train;
    // With --data_parallel, the program a data-parallel job runs.
    if (FLAGS_data_parallel) {
      DataParallelOptions dpo;
      dpo.bucket_bytes = static_cast<int64_t>(FLAGS_dp_bucket_mb * (1 << 20));
      AppendDataParallel(&s.program, dpo);
    }
    s.keep = {m.features, m.labels, m.loss};
    s.description = "the training program of model `" + FLAGS_model + "` (" + DatasetFromFlags() + ", optimizer " +
                    FLAGS_optimizer + ")";
    return s;
  }
  s.program = LoadProgram(FLAGS_program);
  if (!FLAGS_append_backward.empty()) AppendBackward(&s.program, FLAGS_append_backward);
  ValidateProgram(s.program);
  s.keep = ProgramFeedsAndResults(s.program.blocks(0));
  if (!FLAGS_append_backward.empty()) s.keep.insert(FLAGS_append_backward);
  for (const auto& f : SplitOpList(FLAGS_fetch)) s.keep.insert(f);
  s.description = "program `" + FLAGS_program + "`" +
                  (FLAGS_append_backward.empty() ? "" : " with the backward of `" + FLAGS_append_backward + "`");
  return s;
}

}  // namespace

int DumpCommand() {
  if (FLAGS_out.empty()) ThrowInvalidArgument("--out DIR is required");
  if (FLAGS_batch_size < 1) ThrowInvalidArgument("--batch_size must be at least 1, got ", FLAGS_batch_size);
  CheckDumpPassesFlag();
  const DumpResult r = WriteDump(LoadDumpSource(), FLAGS_out);
  std::fputs(r.explain.c_str(), stdout);
  std::printf("wrote %s/index.md, program.{before,after}.pbtxt, program.dot and %zu cluster folders\n",
              FLAGS_out.c_str(), r.clusters);
  return 0;
}

}  // namespace kiln::tools
