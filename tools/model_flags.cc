#include "tools/model_flags.h"

#include <sys/stat.h>

#include <cmath>
#include <sstream>

#include <gflags/gflags.h>
#include <nlohmann/json.hpp>

#include "framework/checkpoint/checkpoint.h"
#include "framework/error.h"
#include "framework/file_util.h"
#include "framework/flags.h"
#include "framework/lr_schedule.h"
#include "framework/op_desc.h"
#include "framework/program_io.h"
#include "framework/suggest.h"

namespace kiln::tools {

bool SyntheticByDefault(const std::string& model) {
  return model == "transformer" || model == "resnet" || model == "gpt";
}

std::string DatasetFromFlags() {
  if (!FLAGS_dataset.empty()) return FLAGS_dataset;
  return SyntheticByDefault(FLAGS_model) ? "synthetic" : "digits";
}

namespace {

// --weight_decay; left out, the optimizer's default: Paddle's 0.01 for adamw,
// no decay for the others. The flag's default (-1) is only a marker, so an
// explicit negative value is refused like any other.
float WeightDecayFromFlags(OptimizerKind kind) {
  if (gflags::GetCommandLineFlagInfoOrDie("weight_decay").is_default) {
    return kind == OptimizerKind::kAdamW ? 0.01f : 0.f;
  }
  const float decay = static_cast<float>(FLAGS_weight_decay);
  if (!(std::isfinite(decay) && decay >= 0)) {
    ThrowInvalidArgument("--weight_decay must be a finite number >= 0 (leave it out for the optimizer's default), got ",
                         FLAGS_weight_decay);
  }
  return decay;
}

TrainConfig TrainConfigFromFlags() {
  TrainConfig tc;
  tc.optimizer = ParseOptimizer(FLAGS_optimizer);
  tc.lr = static_cast<float>(FLAGS_lr);
  if (!FLAGS_lr_schedule.empty()) tc.lr_schedule = ParseLrSchedule(FLAGS_lr_schedule, tc.lr);
  if (FLAGS_grad_merge_steps < 1) ThrowInvalidArgument("--grad_merge_steps must be >= 1, got ", FLAGS_grad_merge_steps);
  tc.grad_merge_steps = FLAGS_grad_merge_steps;
  tc.seed = FLAGS_seed;
  tc.weight_decay = WeightDecayFromFlags(tc.optimizer);
  tc.grad_clip_norm = static_cast<float>(FLAGS_grad_clip_norm);
  return tc;
}

void CheckDatasetName(const std::string& dataset) {
  if (dataset == "digits" || dataset == "fashion-mnist" || dataset == "synthetic") return;
  ThrowInvalidArgument("unknown dataset '", dataset, "': expected digits, fashion-mnist or synthetic",
                       DidYouMean(dataset, {"digits", "fashion-mnist", "synthetic"}));
}

// The dims of one sample of `dataset` as its loader gives them.
Dims DatasetSampleDims(const std::string& dataset) {
  if (dataset == "digits") return {64};
  if (dataset == "fashion-mnist") return {28, 28};
  return {FLAGS_seq_len, FLAGS_d_model};
}

bool IsDir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// model.json's "inputs" or "outputs": the kiln var names.
std::vector<std::string> VarNames(const nlohmann::json& model, const char* key, const std::string& file) {
  if (!model.contains(key) || !model[key].is_array()) {
    ThrowInvalidArgument(file, ": no \"", key, "\" list (is it a directory kiln import wrote?)");
  }
  std::vector<std::string> names;
  for (const auto& v : model[key]) {
    if (!v.is_object() || !v.contains("name") || !v["name"].is_string()) {
      ThrowInvalidArgument(file, ": an entry of \"", key, "\" has no \"name\"");
    }
    names.push_back(v["name"].get<std::string>());
  }
  return names;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

bool ProgramModelFlagsSet() { return !FLAGS_program.empty() || !FLAGS_from.empty(); }

Model BuildProgramModelFromFlags(const std::string& dataset) {
  CheckDatasetName(dataset);
  if (!gflags::GetCommandLineFlagInfoOrDie("model").is_default) {
    ThrowInvalidArgument("--model ", FLAGS_model, " and --from/--program both name the model: give one");
  }
  if (FLAGS_from.empty()) {
    ThrowInvalidArgument("--program ", FLAGS_program,
                         " needs --from DIR, the directory kiln import wrote (the program's values and model.json)");
  }
  if (!IsDir(FLAGS_from)) ThrowNotFound("--from ", FLAGS_from, ": not a directory (kiln import --out DIR writes one)");
  const std::string json_path = FLAGS_from + "/model.json";
  if (!IsFile(json_path)) {
    ThrowNotFound("--from ", FLAGS_from, ": no model.json; kiln train --from takes the directory kiln import wrote");
  }
  nlohmann::json model;
  try {
    model = nlohmann::json::parse(ReadFile(json_path));
  } catch (const nlohmann::json::exception& e) {
    ThrowInvalidArgument(json_path, ": not valid JSON (", e.what(), ")");
  }
  const std::vector<std::string> inputs = VarNames(model, "inputs", json_path);
  const std::vector<std::string> outputs = VarNames(model, "outputs", json_path);
  if (inputs.size() != 1) {
    ThrowInvalidArgument("the program takes ", inputs.size(), " inputs (", JoinNames(inputs),
                         "); kiln train feeds one, the dataset's samples");
  }
  if (outputs.size() != 1) {
    ThrowInvalidArgument("the program has ", outputs.size(), " outputs (", JoinNames(outputs),
                         "); kiln train needs one, the logits [batch, classes]");
  }
  const std::string program_path = FLAGS_program.empty() ? FLAGS_from + "/program.pbtxt" : FLAGS_program;
  ProgramClassifier c;
  c.program = LoadProgram(program_path);
  c.input = inputs[0];
  c.output = outputs[0];
  ReadCheckpoint(FLAGS_from, &c.values);  // verifies every sha256

  // The shapes, before anything is built or trained.
  const Dims in_dims = VarDims(RequireVarDesc(c.program.blocks(0), c.input, "input"));
  const Dims sample(in_dims.begin() + (in_dims.empty() ? 0 : 1), in_dims.end());
  const Dims data_dims = DatasetSampleDims(dataset);
  bool known = !in_dims.empty();
  for (int64_t d : sample) known = known && d > 0;
  if (known && Numel(sample) != Numel(data_dims)) {
    ThrowInvalidArgument("the program's input '", c.input, "' takes samples of ", DimsToString(sample),
                         " (", DimsToString(in_dims), "); dataset ", dataset, " has samples of ",
                         DimsToString(data_dims));
  }
  const int64_t batch = in_dims.empty() ? -1 : in_dims[0];
  if (batch > 0 && batch != FLAGS_batch_size) {
    ThrowInvalidArgument("the program's input '", c.input, "' ", DimsToString(in_dims), " has a fixed batch of ",
                         batch, ", and --batch_size is ", FLAGS_batch_size, ": give --batch_size ", batch,
                         ", or import with --input_shape NAME=-1,... for any batch");
  }
  if (batch > 0 && FLAGS_data_parallel) {
    ThrowInvalidArgument("the program's input '", c.input, "' has a fixed batch of ", batch,
                         ", which --data_parallel cannot split over its ranks: import with --input_shape NAME=-1,...");
  }
  if (batch > 0 && FLAGS_eval_batch_size != 0 && FLAGS_eval_batch_size != batch) {
    ThrowInvalidArgument("the program's input '", c.input, "' has a fixed batch of ", batch,
                         ", and --eval_batch_size is ", FLAGS_eval_batch_size, ": leave it out or give ", batch);
  }
  Model m = BuildFromProgram(c, TrainConfigFromFlags());
  const Dims out_dims = VarDims(RequireVarDesc(c.program.blocks(0), c.output, "output"));
  constexpr int64_t kDatasetClasses = 10;  // digits, fashion-mnist and synthetic alike
  if (out_dims[1] < kDatasetClasses) {
    ThrowInvalidArgument("the program's output '", c.output, "' ", DimsToString(out_dims), " has ", out_dims[1],
                         " classes; dataset ", dataset, " has ", kDatasetClasses);
  }
  return m;
}

namespace {

// "N,N,..." of positive sizes (empty items skipped); throws naming `flag`.
std::vector<int64_t> ParseSizes(const std::string& flag, const std::string& value, const char* what) {
  std::vector<int64_t> sizes;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    int64_t v = 0;
    try {
      v = std::stoll(item);
    } catch (const std::exception&) {
      v = 0;
    }
    if (v <= 0) ThrowInvalidArgument("--", flag, ": '", item, "' is not a positive ", what);
    sizes.push_back(v);
  }
  return sizes;
}

Model BuildResnetFromFlags(const std::string& dataset, const TrainConfig& tc) {
  ResnetConfig c;
  if (dataset != "synthetic") {  // the image datasets, one channel
    c.channels = 1;
    c.height = c.width = dataset == "digits" ? 8 : 28;
  }
  c.widths = ParseSizes("resnet_widths", FLAGS_resnet_widths, "channel count");
  if (c.widths.empty()) {
    ThrowInvalidArgument("--resnet_widths is empty: give the channels of each stage, e.g. 32,64,128,256");
  }
  if (FLAGS_resnet_blocks < 1) ThrowInvalidArgument("--resnet_blocks must be at least 1, got ", FLAGS_resnet_blocks);
  c.blocks = FLAGS_resnet_blocks;
  return BuildResnet(c, tc);
}

Model BuildGptFromFlags(const std::string& dataset, const TrainConfig& tc) {
  if (dataset != "synthetic") ThrowInvalidArgument("--model gpt trains on synthetic token sequences, not ", dataset);
  GptConfig c;
  c.layers = FLAGS_gpt_layers;
  c.seq_len = FLAGS_seq_len;
  c.d_model = FLAGS_d_model;
  c.num_heads = FLAGS_num_heads;
  c.ffn_dim = FLAGS_ffn_dim;
  c.vocab = FLAGS_vocab;
  return BuildGpt(c, tc);  // its errors name the flags
}

}  // namespace

Model BuildModelFromFlags(const std::string& dataset) {
  const TrainConfig tc = TrainConfigFromFlags();
  CheckDatasetName(dataset);
  const bool image = dataset == "digits" || dataset == "fashion-mnist";
  const int64_t side = dataset == "digits" ? 8 : 28;
  if (FLAGS_model == "mlp") {
    if (!image) ThrowInvalidArgument("--model mlp trains on digits or fashion-mnist, not ", dataset);
    MlpConfig c;
    c.input = side * side;
    c.hidden = ParseSizes("mlp_hidden", FLAGS_mlp_hidden, "layer size");
    return BuildMlp(c, tc);
  }
  if (FLAGS_model == "cnn") {
    if (!image) ThrowInvalidArgument("--model cnn trains on digits or fashion-mnist, not ", dataset);
    CnnConfig c;
    c.height = c.width = side;
    return BuildCnn(c, tc);
  }
  if (FLAGS_model == "transformer") {
    if (image) ThrowInvalidArgument("--model transformer trains on synthetic data, not ", dataset);
    TransformerConfig c;
    c.seq_len = FLAGS_seq_len;
    c.d_model = FLAGS_d_model;
    c.num_heads = FLAGS_num_heads;
    c.ffn_dim = FLAGS_ffn_dim;
    return BuildTransformer(c, tc);
  }
  if (FLAGS_model == "resnet") return BuildResnetFromFlags(dataset, tc);
  if (FLAGS_model == "gpt") return BuildGptFromFlags(dataset, tc);
  ThrowInvalidArgument("unknown model '", FLAGS_model, "': expected mlp, cnn, transformer, resnet or gpt",
                       DidYouMean(FLAGS_model, {"mlp", "cnn", "transformer", "resnet", "gpt"}));
}

}  // namespace kiln::tools
