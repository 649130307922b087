// BuildGpt (models.h): a GPT-style decoder-only language model.
#include <string>
#include <vector>

#include "framework/models/model_layers.h"
#include "framework/models/models.h"
#include "framework/program_builder.h"

namespace kiln {
namespace {

using model_layers::Act;
using model_layers::Fc;
using model_layers::LayerNorm;

void CheckGptConfig(const GptConfig& c) {
  auto positive = [](int64_t v, const char* field, const char* flag) {
    if (v < 1) ThrowInvalidArgument("gpt: ", field, " (", flag, ") must be at least 1, got ", v);
  };
  positive(c.layers, "layers", "--gpt_layers");
  positive(c.seq_len, "seq_len", "--seq_len");
  positive(c.d_model, "d_model", "--d_model");
  positive(c.num_heads, "num_heads", "--num_heads");
  positive(c.ffn_dim, "ffn_dim", "--ffn_dim");
  if (c.vocab < 2) ThrowInvalidArgument("gpt: vocab (--vocab) must be at least 2, got ", c.vocab);
  if (c.d_model % c.num_heads != 0) {
    ThrowInvalidArgument("gpt: num_heads (--num_heads) ", c.num_heads, " does not divide d_model (--d_model) ",
                         c.d_model);
  }
}

// Token ids [B, seq_len, 1] (INT64) from features[:, start : start + seq_len]
// (f32 holding exact integers).
std::string TokenWindow(ProgramBuilder& b, const std::string& features, int64_t start, int64_t seq_len) {
  std::string w = b.Op1("slice", {{"Input", {features}}},
                        {{"axes", std::vector<int64_t>{1}},
                         {"starts", std::vector<int64_t>{start}},
                         {"ends", std::vector<int64_t>{start + seq_len}}});
  w = b.Op1("cast", {{"X", {w}}},
            {{"in_dtype", static_cast<int64_t>(DataType::kFP32)}, {"out_dtype", static_cast<int64_t>(DataType::kINT64)}});
  return b.Op1("reshape2", {{"X", {w}}}, {{"shape", std::vector<int64_t>{0, seq_len, 1}}});
}

// x + attention(ln(x)), then x + mlp(ln(x)) (pre-LN).
std::string DecoderBlock(ProgramBuilder& b, const GptConfig& c, const std::string& x, const std::string& name) {
  const int64_t d = c.d_model;
  const std::string attn =
      model_layers::SelfAttention(b, LayerNorm(b, x, d, 2, name + ".ln1"), d, c.num_heads, /*causal=*/true,
                                  name + ".attn");
  const std::string h = b.Op1("elementwise_add", {{"X", {x}}, {"Y", {attn}}});
  const std::string mlp = Fc(b, Fc(b, LayerNorm(b, h, d, 2, name + ".ln2"), d, c.ffn_dim, Act::kGelu, name + ".ffn0"),
                             c.ffn_dim, d, Act::kNone, name + ".ffn1");
  return b.Op1("elementwise_add", {{"X", {h}}, {"Y", {mlp}}});
}

}  // namespace

Model BuildGpt(const GptConfig& c, const TrainConfig& tc) {
  CheckGptConfig(c);
  ProgramBuilder b(tc.seed);
  Model m;
  const int64_t t = c.seq_len, d = c.d_model;
  m.sample_dims = {t + 1};
  m.token_vocab = c.vocab;
  m.features = b.Data("features", {-1, t + 1});
  m.labels = b.Data("labels", {-1, 1}, DataType::kINT64);
  const std::string inputs = TokenWindow(b, m.features, 0, t);
  const std::string targets = TokenWindow(b, m.features, 1, t);

  const std::string table = b.Param("tok_emb.w", {c.vocab, d}, Init::XavierUniform(c.vocab, d));
  const std::string pos = b.Param("pos_emb.w", {t, d}, Init::Uniform(0.02f));
  std::string x = b.Op1("lookup_table", {{"W", {table}}, {"Ids", {inputs}}});
  x = b.Op1("elementwise_add", {{"X", {x}}, {"Y", {pos}}});
  for (int64_t l = 0; l < c.layers; ++l) x = DecoderBlock(b, c, x, "block" + std::to_string(l));
  const std::string logits = Fc(b, LayerNorm(b, x, d, 2, "ln_f"), d, c.vocab, Act::kNone, "head");

  const auto [softmax, loss] = model_layers::SoftmaxCrossEntropy(b, logits, targets);
  m.loss = loss;
  // The prediction after the whole context: position t - 1's next token.
  m.probs = b.Op1("slice", {{"Input", {softmax}}},
                  {{"axes", std::vector<int64_t>{1}},
                   {"starts", std::vector<int64_t>{t - 1}},
                   {"ends", std::vector<int64_t>{t}},
                   {"decrease_axis", std::vector<int64_t>{1}}});
  return model_layers::Finish(b, std::move(m), tc);
}

}  // namespace kiln
