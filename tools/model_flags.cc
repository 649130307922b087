#include "tools/model_flags.h"

#include <sstream>

#include "framework/error.h"
#include "framework/flags.h"
#include "framework/suggest.h"

namespace kiln::tools {

std::string DatasetFromFlags() {
  if (!FLAGS_dataset.empty()) return FLAGS_dataset;
  return FLAGS_model == "transformer" ? "synthetic" : "digits";
}

Model BuildModelFromFlags(const std::string& dataset) {
  TrainConfig tc;
  tc.optimizer = ParseOptimizer(FLAGS_optimizer);
  tc.lr = static_cast<float>(FLAGS_lr);
  tc.seed = FLAGS_seed;
  const bool image = dataset == "digits" || dataset == "fashion-mnist";
  if (!image && dataset != "synthetic") {
    ThrowInvalidArgument("unknown dataset '", dataset, "': expected digits, fashion-mnist or synthetic",
                         DidYouMean(dataset, {"digits", "fashion-mnist", "synthetic"}));
  }
  const int64_t side = dataset == "digits" ? 8 : 28;
  if (FLAGS_model == "mlp") {
    if (!image) ThrowInvalidArgument("--model mlp trains on digits or fashion-mnist, not ", dataset);
    MlpConfig c;
    c.input = side * side;
    c.hidden.clear();
    std::stringstream ss(FLAGS_mlp_hidden);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (item.empty()) continue;
      int64_t v = 0;
      try {
        v = std::stoll(item);
      } catch (const std::exception&) {
        v = 0;
      }
      if (v <= 0) ThrowInvalidArgument("--mlp_hidden: '", item, "' is not a positive layer size");
      c.hidden.push_back(v);
    }
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
  ThrowInvalidArgument("unknown model '", FLAGS_model, "': expected mlp, cnn or transformer",
                       DidYouMean(FLAGS_model, {"mlp", "cnn", "transformer"}));
}

}  // namespace kiln::tools
