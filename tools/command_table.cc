#include "tools/command_table.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace kiln::tools {
namespace {

using Flags = std::vector<std::string>;

const std::map<std::string, Flags>& GroupFlags() {
  static const std::map<std::string, Flags> groups = {
      {"model", {"model", "mlp_hidden", "seq_len", "d_model", "num_heads", "ffn_dim", "resnet_widths", "resnet_blocks", "gpt_layers", "vocab"}},
      {"data", {"dataset", "data_dir", "synthetic_size"}},
      {"training",
       {"optimizer", "lr", "lr_schedule", "weight_decay", "grad_merge_steps", "grad_clip_norm", "epochs", "batch_size", "eval_batch_size", "num_workers", "max_steps", "seed",
        "stop_on_nonfinite", "resume"}},
      {"program", {"program", "append_backward", "fetch", "steps", "from"}},
      {"JIT",
       {"use_jit", "jit_launch_mode", "jit_isa", "jit_fuse_elementwise", "jit_reuse_buffers", "fuse_attention",
        "fuse_decompositions",
        "jit_allow_ops", "jit_deny_ops", "jit_deny_clusters", "jit_min_cluster_size", "jit_cache_capacity",
        "jit_recompile_limit", "jit_dynamic", "jit_explain", "jit_verbose", "jit_dump_dir", "jit_profile", "jit_shadow_every",
        "jit_shadow_rtol", "jit_shadow_atol"}},
      {"kernels", {"use_onednn", "check_nan_inf", "deterministic", "amp"}},
      {"memory",
       {"free_intermediates", "release_shape_only", "use_inplace", "recompute", "recompute_ops", "cache_allocations",
        "memory_report"}},
      {"output",
       {"out", "metrics_out", "history", "trace", "trace_steps", "trace_warmup", "save_dir", "save_every_steps",
        "keep_checkpoints", "dump_passes", "progress", "markdown"}},
      {"bench", {"bench_what", "bench_warmup", "bench_steps", "bench_matmul_size", "bench_copy_mib", "bench_churn_sizes"}},
      {"distributed", {"data_parallel", "dp_bucket_mb", "dp_check_every", "dp_timeout_s"}},
  };
  return groups;
}

Flags Group(const std::string& name) { return GroupFlags().at(name); }

Flags Join(std::initializer_list<Flags> parts) {
  Flags out;
  for (const Flags& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// What every command that runs programs reads: the JIT, the kernels, memory.
Flags Running() { return Join({Group("JIT"), Group("kernels"), Group("memory")}); }

std::vector<CommandInfo> MakeCommands() {
  const std::pair<std::string, std::string> feed = {
      "--feed NAME=FILE.npy", "feed var NAME from a .npy file (repeat for each feed; `=` between, no space)"};
  return {
      {"train", "[--model M | --from DIR [--program DIR/program.pbtxt]] [--flags]",
       "Trains a built-in model (--model) or the classifier kiln import wrote to DIR (--from: its one input takes "
       "the dataset's samples, its one output the logits [batch, classes]; docs/onnx.md) on a dataset, then prints "
       "the test accuracy, the final loss and, with --use_jit, what the JIT compiled.",
       Join({Group("model"), {"from", "program"}, Group("data"), Group("training"), Running(), Group("distributed"),
             {"metrics_out", "history", "trace", "trace_steps", "trace_warmup", "save_dir", "save_every_steps",
              "keep_checkpoints", "dump_passes", "progress"}}),
       {}},
      {"run", "--program P.pbtxt [--feed NAME=FILE.npy ...] --fetch NAME[,NAME] --out DIR [--flags]",
       "Runs a program file on .npy feeds and writes each fetched var to DIR/NAME.npy (OPS.md's contract).",
       Join({{"program", "from", "append_backward", "fetch", "steps", "out", "dump_passes", "progress", "trace"},
             Running()}),
       {feed}},
      {"program", "--out P.pbtxt [--flags]", "Writes a built-in model's training program as protobuf text.",
       Join({Group("model"), {"dataset", "optimizer", "lr", "lr_schedule", "weight_decay", "grad_merge_steps", "grad_clip_norm", "seed", "out"}}), {}},
      {"ops", "[--markdown]", "Lists every registered op with its slots, attributes, kernels and JIT lowering.",
       {"markdown"}, {}},
      {"dump", "(--model M | --program P.pbtxt) --out DIR [--flags]",
       "Compiles every cluster of a model's training program or a program file for --batch_size and writes what "
       "was compiled (docs/dump.md).",
       Join({Group("model"),
             {"dataset", "data_dir", "optimizer", "lr", "lr_schedule", "weight_decay", "grad_clip_norm", "seed", "batch_size"},
             {"program", "append_backward", "fetch", "out", "dump_passes", "data_parallel", "dp_bucket_mb"},
             Running()}),
       {}},
      {"flags", "[--markdown] [--all]",
       "Lists kiln's flags with their defaults (--all adds gflags' own flags).",
       {"markdown"},
       {{"--all", "also list gflags' own flags (flagfile, fromenv, ...)"}}},
      {"bench", "[--flags]",
       "Times training steps of a model on random data, oneDNN matmul or memcpy bandwidth, or a run over many batch "
       "sizes (churn: cache sizes and RSS); prints one JSON line.",
       Join({Group("model"),
             {"dataset", "data_dir", "optimizer", "lr", "lr_schedule", "weight_decay", "grad_clip_norm", "seed", "batch_size", "progress"},
             Group("bench"), Running()}),
       {}},
      {"export", "--from CKPT --out MODEL_DIR [--onnx]",
       "Writes a checkpoint of kiln train --save_dir (or a directory of kiln import) as an inference model: the "
       "forward program pruned for inference, with its parameters; with --onnx, as one ONNX file (docs/onnx.md).",
       {"from", "out"},
       {{"--onnx", "write --out as an ONNX model file (opset 17, inference form: batch_norm and dropout is_test)"}}},
      {"predict", "--model MODEL_DIR [--feed NAME=FILE.npy ...] [--fetch NAME[,NAME]] --out DIR [--flags]",
       "Runs an exported model on .npy feeds (the JIT on unless --use_jit=false) and writes the fetches to DIR.",
       Join({{"fetch", "out"}, Running()}),
       {{"--model MODEL_DIR", "the model directory kiln export (or kiln.save_inference_model) wrote"}, feed}},
      {"import", "MODEL.onnx --out DIR [--input_shape NAME=d0,d1,...] [--trainable NAME,NAME,...]",
       "Imports an ONNX model: writes DIR, a checkpoint holding the program (DIR/program.pbtxt) and its initial "
       "values; start from it with kiln run --program DIR/program.pbtxt --from DIR, or train it with kiln train --from DIR "
       "(docs/onnx.md).",
       {"out", "fuse_decompositions"},
       {{"--input_shape NAME=d0,d1,...",
         "dims of graph input NAME in place of the model's (-1: known at run time; repeat per input)"},
        {"--trainable NAME,NAME,...",
         "the initializers that train, the others frozen (default: every float initializer without an inf or NaN; "
         "ONNX does not tell parameters from buffers)"}}},
      {"plot", "A.jsonl [B.jsonl ...] --out curves.svg",
       "Draws training curves (loss, test accuracy, step time) from kiln train --history files, overlaid to compare "
       "runs, as one SVG.",
       {"out"}, {}},
      {"help", "[COMMAND]", "Prints the commands, or one command's usage and flags.", {}, {}},
      {"completion", "bash", "Prints a bash completion script: eval \"$(./build/tools/kiln completion bash)\".",
       {}, {}},
  };
}

// What a flag's value looks like, where its type alone would not say.
const std::map<std::string, std::string>& ValueForms() {
  static const std::map<std::string, std::string> forms = {
      {"fetch", "NAME[,NAME]"},     {"program", "P.pbtxt"},        {"out", "PATH"},
      {"from", "CKPT"},             {"save_dir", "DIR"},           {"resume", "DIR"},
      {"metrics_out", "FILE.json"}, {"history", "FILE.jsonl"}, {"trace", "FILE.json"},     {"dump_passes", "DIR"},        {"jit_dump_dir", "DIR"},
      {"data_dir", "DIR"},          {"append_backward", "LOSS"},   {"model", "NAME"},
      {"dataset", "NAME"},          {"optimizer", "NAME"},         {"lr_schedule", "KIND:K=V[,K=V]"},         {"jit_allow_ops", "OP[,OP]"},
      {"jit_deny_ops", "OP[,OP]"},  {"jit_deny_clusters", "KEY[,KEY]"}, {"recompute_ops", "OP[,OP]"},
      {"mlp_hidden", "N[,N]"},      {"resnet_widths", "N[,N]"},      {"jit_launch_mode", "runtime|executor"}, {"jit_isa", "avx512|avx2"},
      {"bench_what", "model|matmul|copy|churn"},
  };
  return forms;
}

std::string Placeholder(const gflags::CommandLineFlagInfo& f) {
  if (f.type == "bool") return "";
  auto it = ValueForms().find(f.name);
  if (it != ValueForms().end()) return "=" + it->second;
  if (f.type == "string") return "=S";
  if (f.type == "double") return "=X";
  return "=N";
}

}  // namespace

std::string FlagDefaultText(const gflags::CommandLineFlagInfo& f) {
  if (f.type == "string") return "\"" + f.default_value + "\"";
  if (f.type == "double") {
    std::ostringstream s;
    s << std::stod(f.default_value);  // 0.1, not gflags' 0.10000000000000001
    return s.str();
  }
  return f.default_value;
}

namespace {

std::string Pad(std::string s, size_t width) {
  if (s.size() < width) s.resize(width, ' ');
  return s + " ";
}

}  // namespace

const std::vector<CommandInfo>& Commands() {
  static const std::vector<CommandInfo> commands = MakeCommands();
  return commands;
}

const CommandInfo* FindCommand(const std::string& name) {
  for (const CommandInfo& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::vector<std::string> CommandNames() {
  std::vector<std::string> out;
  for (const CommandInfo& c : Commands()) out.push_back(c.name);
  return out;
}

const std::vector<std::string>& FlagGroups() {
  static const std::vector<std::string> order = {"model",  "data",   "training", "program",    "JIT",
                                                 "kernels", "memory", "output",   "distributed", "bench"};
  return order;
}

std::string FlagGroup(const std::string& flag) {
  for (const auto& [group, flags] : GroupFlags()) {
    if (std::find(flags.begin(), flags.end(), flag) != flags.end()) return group;
  }
  return "";
}

std::vector<gflags::CommandLineFlagInfo> KilnFlags() {
  std::vector<gflags::CommandLineFlagInfo> all, out;
  gflags::GetAllFlags(&all);
  for (const auto& f : all) {
    if (f.filename.find("framework/flags.cc") != std::string::npos) out.push_back(f);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

std::vector<std::string> KilnFlagNames() {
  std::vector<std::string> out;
  for (const auto& f : KilnFlags()) out.push_back(f.name);
  return out;
}

std::string CommandHelp(const CommandInfo& c) {
  std::ostringstream out;
  out << "usage: kiln " << c.name << " " << c.usage << "\n\n" << c.summary << "\n";
  if (!c.extra_args.empty()) {
    out << "\narguments:\n";
    for (const auto& [form, what] : c.extra_args) out << "  " << Pad(form, 30) << what << "\n";
  }
  std::map<std::string, std::vector<gflags::CommandLineFlagInfo>> by_group;
  for (const auto& f : KilnFlags()) {
    if (std::find(c.flags.begin(), c.flags.end(), f.name) != c.flags.end()) by_group[FlagGroup(f.name)].push_back(f);
  }
  for (const std::string& group : FlagGroups()) {
    auto it = by_group.find(group);
    if (it == by_group.end()) continue;
    out << "\n" << group << ":\n";
    for (const auto& f : it->second) {
      out << "  " << Pad("--" + f.name + Placeholder(f), 30) << f.description;
      // A description that explains its default says it better than the value.
      if (f.description.find("default") == std::string::npos) out << " (default " << FlagDefaultText(f) << ")";
      out << "\n";
    }
  }
  out << "\nEvery flag can also be set as an environment variable FLAGS_<name>; `kiln flags` lists them all.\n";
  return out.str();
}

std::string MainHelp() {
  std::ostringstream out;
  out << "usage: kiln <command> [--flags]\n\ncommands:\n";
  for (const CommandInfo& c : Commands()) out << "  " << Pad(c.name, 11) << c.summary << "\n";
  out << "\n`kiln <command> --help` (or `kiln help <command>`) shows a command's usage and flags.\n";
  return out.str();
}

}  // namespace kiln::tools
