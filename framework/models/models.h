// Model builders: an MLP, a LeNet-style CNN, a transformer encoder block, a
// ResNet-style CNN (resnet.cc) and a GPT-style decoder (gpt.cc), each as a startup program (seeded parameter initialisation), a forward
// program (features, labels -> probabilities, loss) and a training program
// (forward + append_backward + optimizer updates in place).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "framework/lr_schedule.h"
#include "framework/optimizer_builder.h"
#include "framework/proto/framework.pb.h"
#include "framework/tensor.h"

namespace kiln {


struct TrainConfig {
  OptimizerKind optimizer = OptimizerKind::kSgd;
  float lr = 0.1f;
  uint64_t seed = 1;
  float momentum = 0.9f;  // momentum's mu
  float weight_decay = 0.f;  // OptimizerConfig::weight_decay
  float grad_clip_norm = 0.f;  // OptimizerConfig::grad_clip_norm (0: no clipping)
  // A learning-rate schedule over the learning-rate var (kind empty: none).
  std::optional<LrSchedule> lr_schedule;
  int64_t grad_merge_steps = 1;  // OptimizerConfig::grad_merge_steps
};

struct MlpConfig {
  int64_t input = 64;
  std::vector<int64_t> hidden = {128};
  int64_t classes = 10;
};

struct CnnConfig {  // conv(6,5x5,pad 2)-relu-maxpool2 -> conv(16,5x5,pad 2)-relu-maxpool2 -> fc120-fc84-fc
  int64_t channels = 1;
  int64_t height = 28;
  int64_t width = 28;
  int64_t classes = 10;
};

struct TransformerConfig {  // one post-LN encoder block, mean-pooled, then a classifier
  int64_t seq_len = 16;
  int64_t d_model = 32;
  int64_t num_heads = 4;
  int64_t ffn_dim = 64;
  int64_t classes = 10;
};

// Stem conv3x3-bn-relu; one stage per entry of `widths`, each `blocks` basic
// blocks (conv3x3-bn-relu-conv3x3-bn plus the shortcut, then relu; the first
// block of every stage after the first has stride 2, and its shortcut is a
// 1x1 conv-bn wherever the shape changes); global average pool; fc to the
// classes. Convolutions have no bias; batch_norm's running statistics follow
// momentum 0.9 in training, and the forward program reads them (is_test).
struct ResnetConfig {
  int64_t channels = 3;
  int64_t height = 32;
  int64_t width = 32;
  std::vector<int64_t> widths = {32, 64, 128, 256};
  int64_t blocks = 2;  // basic blocks per stage
  int64_t classes = 10;
};

// A sample is seq_len + 1 token ids, fed as f32 features [B, seq_len + 1]
// (exact integers): the model reads the first seq_len and predicts each next
// token. Token + learned position embeddings, `layers` pre-LN decoder blocks
// (causal self-attention, GELU MLP of ffn_dim), a final layer_norm and a
// projection to the vocabulary; the loss is the mean cross-entropy over all
// seq_len next tokens. The labels ([B, 1]) are the last token, so probs
// ([B, vocab], the prediction after the whole context) and the trainer's test
// accuracy are about that one.
struct GptConfig {
  int64_t layers = 4;
  int64_t seq_len = 128;
  int64_t d_model = 256;
  int64_t num_heads = 4;
  int64_t ffn_dim = 1024;
  int64_t vocab = 256;
};

struct Model {
  proto::ProgramDesc startup;
  proto::ProgramDesc forward;
  proto::ProgramDesc train;
  std::string features;  // data var [-1, sample dims...]
  std::string labels;    // data var INT64 [-1, 1]
  std::string loss;      // [1]
  std::string probs;     // softmax output [-1, classes]
  std::vector<std::string> params;
  Dims sample_dims;  // per-sample feature dims
  // > 0: the features are token ids in [0, token_vocab) stored as f32.
  int64_t token_vocab = 0;
};

Model BuildMlp(const MlpConfig& config, const TrainConfig& train);
Model BuildCnn(const CnnConfig& config, const TrainConfig& train);
Model BuildTransformer(const TransformerConfig& config, const TrainConfig& train);
// Both throw InvalidArgument naming the field and its flag (kiln train's
// --resnet_widths, --num_heads, ...) for a bad configuration.
Model BuildResnet(const ResnetConfig& config, const TrainConfig& train);
Model BuildGpt(const GptConfig& config, const TrainConfig& train);

// A classifier someone else wrote as a program (kiln import's DIR): `program`
// reads the samples from its one feed `input` (f32 [B, sample dims...], B
// -1 or fixed) and writes the logits to `output` (f32 [B, classes]);
// `values` holds the initial value of every persistable var it reads
// (parameters, running statistics, constants), as a checkpoint does.
struct ProgramClassifier {
  proto::ProgramDesc program;
  std::string input;
  std::string output;
  std::map<std::string, Tensor> values;
};

// The Model that trains it like the built-in ones: softmax cross-entropy and
// mean on the logits with an INT64 [B, 1] label var, append_backward and the
// optimizer of `train` (only vars that are persistable and not stop_gradient
// train: the importer's parameters, not its frozen initializers or state);
// the startup program fills `values` (assign_value) before the optimizer's
// state; the forward program is evaluated with is_test set (batch_norm on
// its running statistics, no dropout). Throws InvalidArgument naming the var
// when `input` is not f32 with known sample dims, `output` is not
// [B, classes] (per-token logits [B, T, classes] are refused: kiln's
// datasets have one label per sample), a persistable var has no value, or a
// value has no persistable var or the wrong dtype or dims.
Model BuildFromProgram(const ProgramClassifier& classifier, const TrainConfig& train);

}  // namespace kiln
