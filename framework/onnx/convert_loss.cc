// Losses: NegativeLogLikelihoodLoss onto nll_loss, and
// SoftmaxCrossEntropyLoss as log_softmax along the class dim followed by
// nll_loss, which is its definition in the ONNX spec (its optional log_prob
// output is the log_softmax).
#include <limits>

#include "framework/onnx/convert_util.h"
#include "framework/onnx/converter_table.h"

namespace kiln::onnx_import {
namespace {

// nll_loss of log-probabilities `x` into output 0. Without ignore_index
// ONNX ignores no label; nll_loss's ignore_index is then a value no label
// takes (an int64 label that low is invalid in ONNX as well).
void NllLoss(NodeContext& ctx, const std::string& x) {
  const std::string reduction = ctx.String("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") {
    ctx.Refuse("reduction '", reduction, "': expected none, sum or mean");
  }
  const int64_t ignore = ctx.Int("ignore_index", std::numeric_limits<int64_t>::min());
  SlotArgsList in = {{"X", {x}}, {"Label", {ctx.Input(1, VarRole::kConstant)}}};
  if (ctx.HasInput(2)) in.push_back({"Weight", {ctx.Input(2, VarRole::kConstant)}});
  ctx.Op("nll_loss", in, {{"Out", {ctx.Out(0)}}}, {{"reduction", reduction}, {"ignore_index", ignore}});
}

void ConvertNegativeLogLikelihoodLoss(NodeContext& ctx) { NllLoss(ctx, ctx.Input(0)); }

void ConvertSoftmaxCrossEntropyLoss(NodeContext& ctx) {
  if (ctx.InputDims(0).size() < 2) ctx.Refuse("scores ", DimsToString(ctx.InputDims(0)), ": expected [N, C, ...]");
  const std::string log_prob = ctx.HasOutput(1) ? ctx.Out(1) : "";
  NllLoss(ctx, ctx.Op1("log_softmax", {{"X", {ctx.Input(0)}}}, {{"axis", int64_t{1}}}, log_prob));
}

}  // namespace

void AddLossConverters(std::vector<Converter>* t) {
  t->push_back(MakeConverter("NegativeLogLikelihoodLoss", 12, ConvertNegativeLogLikelihoodLoss));
  t->push_back(MakeConverter("SoftmaxCrossEntropyLoss", 12, ConvertSoftmaxCrossEntropyLoss));
}

}  // namespace kiln::onnx_import
