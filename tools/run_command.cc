// kiln run: OPS.md's contract for running a program file on .npy feeds, and
// --from CKPT, whose vars set the program's persistable vars.
#include <sys/stat.h>

#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "framework/backward.h"
#include "framework/data/npy.h"
#include "framework/feed_check.h"
#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/durable_io.h"
#include "framework/file_util.h"
#include "framework/flags.h"
#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "framework/trace.h"
#include "framework/validate.h"
#include "tools/commands.h"
#include "tools/jit_setup.h"
#include "tools/pipeline_setup.h"
#include "tools/progress.h"

namespace kiln::tools {
namespace {

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Stacks per-step values of one var on a new leading axis.
Tensor Stack(const std::string& name, const std::vector<Tensor>& steps) {
  const Tensor& first = steps.front();
  Dims dims = first.dims();
  dims.insert(dims.begin(), static_cast<int64_t>(steps.size()));
  Tensor out(first.dtype(), dims);
  char* dst = static_cast<char*>(out.raw_mutable_data(first.dtype()));
  for (const Tensor& t : steps) {
    if (t.dims() != first.dims()) {
      ThrowInvalidArgument("fetch '", name, "': its shape changed between steps (", first.ShapeString(), " vs ",
                           t.ShapeString(), "), so the steps cannot be stacked");
    }
    std::memcpy(dst, t.raw_data(), t.bytes());
    dst += t.bytes();
  }
  return out;
}

// Feeds --feed's .npy files and --from's checkpoint vars into scope (every
// var the program needs, checked); the non-persistable feeds, which every
// step feeds again, go to per_step_feeds.
void FeedInputs(const proto::BlockDesc& block, const std::vector<std::string>& feed_args, Scope* scope,
                std::map<std::string, Tensor>* per_step_feeds) {
  std::set<std::string> fed;
  for (const auto& arg : feed_args) {
    const size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
      ThrowInvalidArgument("--feed '", arg, "': expected NAME=FILE.npy");
    }
    const std::string name = arg.substr(0, eq);
    Tensor value = ReadNpy(arg.substr(eq + 1));
    FeedTensor(block, *scope, name, value);  // checks dtype and dims
    const proto::VarDesc* v = FindVarDesc(block, name);
    if (!v->persistable()) (*per_step_feeds)[name] = std::move(value);
    fed.insert(name);
  }
  // --from: a checkpoint's vars set persistable vars once, as --feed does
  // (kiln import's DIR holds the program's initial values); --feed wins.
  if (!FLAGS_from.empty()) {
    std::map<std::string, Tensor> vars;
    ReadCheckpoint(ResolveCheckpoint(FLAGS_from), &vars);
    for (const auto& [name, value] : vars) {
      if (fed.count(name)) continue;
      if (!RequireVarDesc(block, name, "--from var").persistable()) {
        ThrowInvalidArgument("--from: checkpoint var '", name, "' is not persistable in ", FLAGS_program);
      }
      FeedTensor(block, *scope, name, value);
      fed.insert(name);
    }
  }
  CheckFeeds(block, fed, "--feed");
}

}  // namespace

int RunCommand(const std::vector<std::string>& feed_args) {
  if (FLAGS_program.empty()) ThrowInvalidArgument("--program is required");
  if (FLAGS_out.empty()) ThrowInvalidArgument("--out is required");
  const std::vector<std::string> fetches = SplitComma(FLAGS_fetch);
  if (fetches.empty()) ThrowInvalidArgument("--fetch needs at least one variable name");
  if (FLAGS_steps < 1) ThrowInvalidArgument("--steps must be at least 1, got ", FLAGS_steps);
  CheckDumpPassesFlag();
  MakeDirsOrThrow(FLAGS_out);
  CheckWritableDir(FLAGS_out, "--out");
  if (!FLAGS_trace.empty()) CheckWritableFile(FLAGS_trace, "--trace");

  proto::ProgramDesc program = LoadProgram(FLAGS_program);
  if (!FLAGS_append_backward.empty()) AppendBackward(&program, FLAGS_append_backward);
  ValidateProgram(program);
  const proto::BlockDesc& block = program.blocks(0);
  for (const auto& f : fetches) {
    RequireVarDesc(block, f, "fetch");
  }

  // Read and check every feed before running anything.
  Scope scope;
  std::map<std::string, Tensor> per_step_feeds;
  FeedInputs(block, feed_args, &scope, &per_step_feeds);

  Executor exec(ExecutorOptionsFromFlags());
  std::set<std::string> keep(fetches.begin(), fetches.end());
  std::set<std::string> jit_keep = keep;
  for (const auto& [name, value] : per_step_feeds) jit_keep.insert(name);
  for (const auto& arg : feed_args) jit_keep.insert(arg.substr(0, arg.find('=')));
  program = RunPipelineFromFlags(program, jit_keep);
  auto plan = exec.Prepare(program, 0, keep);
  std::map<std::string, std::vector<Tensor>> fetched;
  ProgressBar bar("kiln run", FLAGS_steps, FLAGS_progress, /*delay_s=*/1.0);
  if (!FLAGS_trace.empty()) Tracer::Global().Start();  // every step; compiles are marked
  for (int step = 0; step < FLAGS_steps; ++step) {
    bar.Update(step);
    if (step > 0) {
      for (const auto& [name, value] : per_step_feeds) scope.Var(name)->GetMutable()->CopyFrom(value);
    }
    exec.Run(*plan, scope);
    for (const auto& f : fetches) {
      const Tensor& t = scope.GetVar(f)->Get();
      if (!t.initialized()) ThrowInvalidArgument("fetch '", f, "': no op wrote it and it was not fed");
      fetched[f].emplace_back();
      fetched[f].back().CopyFrom(t);
    }
  }
  bar.Update(FLAGS_steps);
  bar.Finish();

  MaybePrintJitExplain();

  // Serialise everything first so an error leaves no partial output.
  std::vector<std::pair<std::string, std::string>> files;
  if (!FLAGS_trace.empty()) {
    Tracer::Global().Stop();
    files.emplace_back(FLAGS_trace, Tracer::Global().ToJson());
  }
  for (const auto& f : fetches) {
    const Tensor out = FLAGS_steps == 1 ? std::move(fetched[f][0]) : Stack(f, fetched[f]);
    files.emplace_back(FLAGS_out + "/" + f + ".npy", NpyBytes(out));
  }
  for (const auto& [path, bytes] : files) WriteFileAtomic(path, bytes);
  return 0;
}

}  // namespace kiln::tools
