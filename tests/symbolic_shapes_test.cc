// Symbolic shape inference for every op (issue 32, point 6): each op of the
// registry with fed dims in the symbols N (the batch) and S (the sequence,
// or a spatial size), with its gradient ops after it (their output grads
// seeded by fill_any_like), and the symbolic dims InferSymbolicShapes finds
// for each of their vars, in a golden file. Cases that must not fit (a
// stride-2 pool over an odd size, a reshape to fixed sizes) are in it too.
#include "compiler/dynamic/symbolic_shapes.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>

#include "framework/op_desc.h"
#include "tests/golden_util.h"

namespace kiln::jit {
namespace {

const char* const kGolden = KILN_SOURCE_DIR "/tests/golden/symbolic_shapes/ops.golden";

// A fed var: dims written "N,S,8" (N and S are the symbols).
struct Feed {
  std::string name;
  std::string dims;
  DataType dtype = DataType::kFP32;
};

struct OpCase {
  proto::OpDesc op;
  std::vector<Feed> feeds;
  int64_t n = 3;  // the symbols' values in the signature
  int64_t s = 4;
  std::string note;  // printed after the type: why the case is there
};

OpCase Case(const OpBuilder& op, std::vector<Feed> feeds, std::string note = "") {
  OpCase c;
  c.op = op.Build();
  c.feeds = std::move(feeds);
  c.note = std::move(note);
  return c;
}

OpBuilder Op(const std::string& type, const std::vector<std::pair<std::string, std::string>>& ins,
             const std::vector<std::pair<std::string, std::string>>& outs) {
  OpBuilder b(type);
  for (const auto& [slot, arg] : ins) b.In(slot, {arg});
  for (const auto& [slot, arg] : outs) b.Out(slot, {arg});
  return b;
}

OpCase Unary(const std::string& type) {
  return Case(Op(type, {{"X", "x"}}, {{"Out", "out"}}), {{"x", "N,S,8"}});
}

OpCase Binary(const std::string& type, DataType dtype = DataType::kFP32) {
  return Case(Op(type, {{"X", "x"}, {"Y", "y"}}, {{"Out", "out"}}), {{"x", "N,S,8", dtype}, {"y", "N,S,8", dtype}});
}

OpCase Reduce(const std::string& type) {
  return Case(Op(type, {{"X", "x"}}, {{"Out", "out"}}).Attr("dim", std::vector<int64_t>{1}), {{"x", "N,S,8"}});
}

// The optimizer update ops over a parameter of S rows.
OpCase Update(const std::string& type) {
  OpBuilder b(type);
  std::vector<Feed> feeds{{"param", "S,8"}, {"grad", "S,8"}, {"lr", "1"}};
  b.In("Param", {"param"}).In("Grad", {"grad"}).In("LearningRate", {"lr"}).Out("ParamOut", {"param"});
  if (type == "momentum") {
    b.In("Velocity", {"velocity"}).Out("VelocityOut", {"velocity"});
    feeds.push_back({"velocity", "S,8"});
  }
  if (type == "adam" || type == "adamw") {
    b.In("Moment1", {"m1"}).In("Moment2", {"m2"}).In("Beta1Pow", {"b1"}).In("Beta2Pow", {"b2"});
    b.Out("Moment1Out", {"m1"}).Out("Moment2Out", {"m2"}).Out("Beta1PowOut", {"b1"}).Out("Beta2PowOut", {"b2"});
    feeds.insert(feeds.end(), {{"m1", "S,8"}, {"m2", "S,8"}, {"b1", "1"}, {"b2", "1"}});
  }
  return Case(b, feeds);
}

using Ints = std::vector<int64_t>;
constexpr DataType kI64 = DataType::kINT64;
constexpr DataType kBool = DataType::kBOOL;

// Elementwise ops, reductions, the optimizer updates, ops without inputs.
void ElementwiseCases(std::vector<OpCase>* out) {
  std::vector<OpCase>& cases = *out;
  for (const char* t : {"abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "celu", "cos", "cosh",
                        "elu", "erf", "exp", "floor", "gelu", "hard_sigmoid", "hard_swish", "isinf", "isnan",
                        "leaky_relu", "log", "log_softmax", "mean", "pow", "reciprocal", "relu",
                        "round", "rsqrt", "scale", "selu", "sigmoid", "sign", "sin", "sinh", "softmax", "softplus",
                        "softsign", "sqrt", "tan", "tanh", "thresholded_relu", "cumsum", "fill_any_like"}) {
    cases.push_back(Unary(t));
  }
  for (const char* t : {"elementwise_add", "elementwise_div", "elementwise_max", "elementwise_min", "elementwise_mod",
                        "elementwise_mul", "elementwise_pow", "elementwise_sub", "equal", "greater_equal",
                        "greater_than", "less_equal", "less_than", "not_equal"}) {
    cases.push_back(Binary(t));
  }
  for (const char* t : {"logical_and", "logical_or", "logical_xor"}) cases.push_back(Binary(t, kBool));
  cases.push_back(Case(Op("logical_not", {{"X", "x"}}, {{"Out", "out"}}), {{"x", "N,S,8", kBool}}));
  cases.push_back(Case(Op("elementwise_add", {{"X", "x"}, {"Y", "bias"}}, {{"Out", "out"}}),
                       {{"x", "N,S,8"}, {"bias", "8"}}, "a bias broadcast"));
  cases.push_back(Case(Op("elementwise_mul", {{"X", "x"}, {"Y", "y"}}, {{"Out", "out"}}).Attr("axis", int64_t{0}),
                       {{"x", "N,S,8"}, {"y", "N"}}, "Y along axis 0"));
  for (const char* t : {"reduce_l1", "reduce_l2", "reduce_max", "reduce_mean", "reduce_min", "reduce_prod",
                        "reduce_sum", "logsumexp"}) {
    cases.push_back(Reduce(t));
  }
  cases.push_back(Case(Op("reduce_sum", {{"X", "x"}}, {{"Out", "out"}}).Attr("reduce_all", true), {{"x", "N,S,8"}},
                       "every dim"));
  for (const char* t : {"sgd", "momentum", "adam", "adamw"}) cases.push_back(Update(t));
  for (const char* t : {"arg_max", "arg_min"}) cases.push_back(Unary(t));
  cases.push_back(Case(Op("assign_value", {}, {{"Out", "out"}})
                           .Attr("shape", Ints{2})
                           .Attr("fp32_values", std::vector<float>{1.0f, 2.0f}),
                       {}));
  cases.push_back(Case(Op("fill_constant", {}, {{"Out", "out"}}).Attr("shape", Ints{2, 3}), {}));
  cases.push_back(Case(Op("uniform_random", {}, {{"Out", "out"}}).Attr("shape", Ints{2, 3}), {}));
}

// Normalisations, casts, collectives, concat.
void NormalisationCases(std::vector<OpCase>* out) {
  std::vector<OpCase>& cases = *out;
  cases.push_back(Case(Op("batch_norm",
                          {{"X", "x"}, {"Scale", "scale"}, {"Bias", "bias"}, {"Mean", "mean"}, {"Variance", "var"}},
                          {{"Y", "y"}, {"MeanOut", "mean"}, {"VarianceOut", "var"}, {"SavedMean", "saved_mean"},
                           {"SavedVariance", "saved_var"}}),
                       {{"x", "N,4,S,S"}, {"scale", "4"}, {"bias", "4"}, {"mean", "4"}, {"var", "4"}}));
  cases.push_back(Case(Op("instance_norm", {{"X", "x"}, {"Scale", "scale"}, {"Bias", "bias"}},
                          {{"Y", "y"}, {"SavedMean", "saved_mean"}, {"SavedVariance", "saved_var"}}),
                       {{"x", "N,4,S,S"}, {"scale", "4"}, {"bias", "4"}}));
  cases.push_back(Case(Op("layer_norm", {{"X", "x"}, {"Scale", "scale"}, {"Bias", "bias"}},
                          {{"Y", "y"}, {"Mean", "mean"}, {"Variance", "var"}})
                           .Attr("begin_norm_axis", int64_t{2}),
                       {{"x", "N,S,8"}, {"scale", "8"}, {"bias", "8"}}));
  cases.push_back(Case(Op("cast", {{"X", "x"}}, {{"Out", "out"}})
                           .Attr("in_dtype", int64_t{0})
                           .Attr("out_dtype", int64_t{1}),
                       {{"x", "N,S,8"}}));
  cases.push_back(Case(Op("clip", {{"X", "x"}}, {{"Out", "out"}}).Attr("min", -1.0f).Attr("max", 1.0f),
                       {{"x", "N,S,8"}}));
  cases.push_back(Case(OpBuilder("clip_by_global_norm").In("X", {"g1", "g2"}).Out("Scale", {"scale"}),
                       {{"g1", "S,8"}, {"g2", "N"}}));
  cases.push_back(Case(OpBuilder("c_allreduce_avg").In("X", {"g1", "g2"}).Out("Out", {"g1", "g2"}),
                       {{"g1", "S,8"}, {"g2", "N"}}));
  cases.push_back(Case(OpBuilder("c_allreduce_start").In("X", {"g1"}).Out("Handle", {"h"}).Attr("bucket", "b0"),
                       {{"g1", "S,8"}}));
  cases.push_back(Case(OpBuilder("c_allreduce_wait")
                           .In("X", {"g1"})
                           .In("Handle", {"h"})
                           .Out("Out", {"g1"})
                           .Attr("bucket", "b0"),
                       {{"g1", "S,8"}, {"h", "1", kI64}}));
}

// Convolutions, attention, indexing, matmul.
void LayoutCases(std::vector<OpCase>* out) {
  std::vector<OpCase>& cases = *out;
  cases.push_back(Case(OpBuilder("concat").In("X", {"a", "b"}).Out("Out", {"out"}).Attr("axis", int64_t{1}),
                       {{"a", "N,S,8"}, {"b", "N,S,8"}}, "a sum of symbols"));
  cases.push_back(Case(OpBuilder("concat").In("X", {"a", "b"}).Out("Out", {"out"}).Attr("axis", int64_t{2}),
                       {{"a", "N,S,8"}, {"b", "N,S,4"}}));
  cases.push_back(Case(Op("conv2d", {{"Input", "x"}, {"Filter", "w"}}, {{"Output", "y"}}),
                       {{"x", "N,3,S,S"}, {"w", "4,3,3,3"}}, "S-2"));
  cases.push_back(Case(Op("conv2d", {{"Input", "x"}, {"Filter", "w"}}, {{"Output", "y"}})
                           .Attr("strides", Ints{2, 2})
                           .Attr("paddings", Ints{1, 1}),
                       {{"x", "N,3,S,S"}, {"w", "4,3,3,3"}}, "stride 2 over an even size: S/2"));
  cases.push_back(Case(Op("dropout", {{"X", "x"}}, {{"Out", "out"}, {"Mask", "mask"}}), {{"x", "N,S,8"}}));
  cases.push_back(Case(Op("expand_v2", {{"X", "x"}}, {{"Out", "out"}}).Attr("shape", Ints{-1, -1, 8}),
                       {{"x", "N,S,1"}}));
  cases.push_back(Case(Op("fused_attention", {{"Q", "q"}, {"K", "k"}, {"V", "v"}}, {{"Out", "out"}, {"LSE", "lse"}})
                           .Attr("causal", true),
                       {{"q", "N,2,S,8"}, {"k", "N,2,S,8"}, {"v", "N,2,S,8"}}));
  cases.push_back(Case(Op("fused_softmax_mask_upper_triangle", {{"X", "x"}}, {{"Out", "out"}}), {{"x", "N,2,S,S"}}));
  cases.push_back(Case(Op("gather", {{"X", "x"}, {"Index", "index"}}, {{"Out", "out"}}),
                       {{"x", "S,8"}, {"index", "N", kI64}}));
  cases.push_back(Case(Op("grad_merge", {{"Grad", "grad"}, {"Acc", "acc"}, {"Apply", "apply"}},
                          {{"Out", "out"}, {"AccOut", "acc"}}),
                       {{"grad", "S,8"}, {"acc", "S,8"}, {"apply", "1"}}));
  cases.push_back(Case(Op("grad_merge_step", {{"Step", "step"}}, {{"StepOut", "step"}, {"Apply", "apply"}}),
                       {{"step", "1"}}));
  cases.push_back(Case(Op("lookup_table", {{"W", "w"}, {"Ids", "ids"}}, {{"Out", "out"}}),
                       {{"w", "16,8"}, {"ids", "N,S,1", kI64}}));
  cases.push_back(Case(Op("lr_schedule", {{"Step", "step"}}, {{"LearningRate", "lr"}, {"StepOut", "step"}}),
                       {{"step", "1"}}));
  cases.push_back(Case(Op("matmul", {{"X", "x"}, {"Y", "w"}}, {{"Out", "out"}}), {{"x", "N,S,8"}, {"w", "8,6"}}));
  cases.push_back(Case(Op("matmul", {{"X", "q"}, {"Y", "k"}}, {{"Out", "out"}}).Attr("transpose_Y", true),
                       {{"q", "N,2,S,8"}, {"k", "N,2,S,8"}}, "scores: S x S"));
  cases.push_back(Case(Op("nll_loss", {{"X", "x"}, {"Label", "label"}}, {{"Out", "out"}, {"Total_weight", "tw"}}),
                       {{"x", "N,8"}, {"label", "N", kI64}}));
  cases.push_back(Case(Op("one_hot", {{"X", "x"}}, {{"Out", "out"}}).Attr("depth", int64_t{5}),
                       {{"x", "N,S,1", kI64}}));
}

// Padding, pooling, reshapes, slices, splits; then the cases that must not fit.
void ShapeCases(std::vector<OpCase>* out) {
  std::vector<OpCase>& cases = *out;
  cases.push_back(Case(Op("pad", {{"X", "x"}}, {{"Out", "out"}}).Attr("paddings", Ints{0, 0, 1, 2, 0, 0}),
                       {{"x", "N,S,8"}}, "S+3"));
  cases.push_back(Case(Op("pool2d", {{"X", "x"}}, {{"Out", "out"}}).Attr("ksize", Ints{2, 2}).Attr("strides", Ints{2, 2}),
                       {{"x", "N,4,S,S"}}, "S/2"));
  cases.push_back(Case(Op("pool2d", {{"X", "x"}}, {{"Out", "out"}}).Attr("ksize", Ints{2, 2}).Attr("global_pooling", true),
                       {{"x", "N,4,S,S"}}, "global"));
  cases.push_back(Case(Op("prelu", {{"X", "x"}, {"Alpha", "alpha"}}, {{"Out", "out"}}),
                       {{"x", "N,S,8"}, {"alpha", "1"}}));
  cases.push_back(Case(Op("reshape2", {{"X", "x"}}, {{"Out", "out"}}).Attr("shape", Ints{-1, 8}),
                       {{"x", "N,S,8"}}, "a product of symbols"));
  cases.push_back(Case(Op("reshape2", {{"X", "x"}}, {{"Out", "out"}}).Attr("shape", Ints{0, 0, 2, 4}),
                       {{"x", "N,S,8"}}, "0 keeps a dim"));
  cases.push_back(Case(Op("sigmoid_cross_entropy_with_logits", {{"X", "x"}, {"Label", "label"}}, {{"Out", "out"}}),
                       {{"x", "N,S,8"}, {"label", "N,S,8"}}));
  cases.push_back(Case(Op("slice", {{"Input", "x"}}, {{"Out", "out"}})
                           .Attr("axes", Ints{1, 2})
                           .Attr("starts", Ints{1, 2})
                           .Attr("ends", Ints{1000000, 6}),
                       {{"x", "N,S,8"}}, "S-1"));
  cases.push_back(Case(Op("softmax_with_cross_entropy", {{"Logits", "logits"}, {"Label", "label"}},
                          {{"Softmax", "softmax"}, {"Loss", "loss"}}),
                       {{"logits", "N,S,8"}, {"label", "N,S,1", kI64}}));
  cases.push_back(Case(OpBuilder("split").In("X", {"x"}).Out("Out", {"a", "b"}).Attr("axis", int64_t{2}).Attr("num", int64_t{2}),
                       {{"x", "N,S,8"}}));
  cases.push_back(Case(OpBuilder("split").In("X", {"x"}).Out("Out", {"a", "b"}).Attr("axis", int64_t{1}).Attr("num", int64_t{2}),
                       {{"x", "N,S,8"}}, "halves of S"));
  cases.push_back(Case(OpBuilder("sum").In("X", {"a", "b"}).Out("Out", {"out"}), {{"a", "N,S,8"}, {"b", "N,S,8"}}));
  cases.push_back(Case(Op("take_along_axis", {{"Input", "x"}, {"Index", "index"}}, {{"Result", "out"}})
                           .Attr("Axis", int64_t{1}),
                       {{"x", "N,S,8"}, {"index", "N,2,8", kI64}}));
  cases.push_back(Case(Op("tile", {{"X", "x"}}, {{"Out", "out"}}).Attr("repeat_times", Ints{1, 2, 1}),
                       {{"x", "N,S,8"}}, "2*S"));
  cases.push_back(Case(Op("transpose2", {{"X", "x"}}, {{"Out", "out"}}).Attr("axis", Ints{1, 0, 2}),
                       {{"x", "N,S,8"}}));
  cases.push_back(Case(Op("where", {{"Condition", "c"}, {"X", "x"}, {"Y", "y"}}, {{"Out", "out"}}),
                       {{"c", "N,S,8", kBool}, {"x", "N,S,8"}, {"y", "N,S,8"}}));
  // Must not fit: each is reported, and a cluster with it stays specialised.
  OpCase odd = Case(Op("pool2d", {{"X", "x"}}, {{"Out", "out"}}).Attr("ksize", Ints{2, 2}).Attr("strides", Ints{2, 2}),
                    {{"x", "N,4,S,S"}}, "must not fit: stride 2 over an odd size is a floor");
  odd.s = 5;
  cases.push_back(odd);
  cases.push_back(Case(Op("reshape2", {{"X", "x"}}, {{"Out", "out"}}).Attr("shape", Ints{3, -1}), {{"x", "N,S,8"}},
                       "fixed rows: whole only where 3 divides 8*N*S"));
}

std::vector<OpCase> ForwardCases() {
  std::vector<OpCase> cases;
  ElementwiseCases(&cases);
  NormalisationCases(&cases);
  LayoutCases(&cases);
  ShapeCases(&cases);
  return cases;
}

// The case as a cluster: its feeds are the inputs; the op, then its grad
// ops, each output grad they read seeded by a fill_any_like of the output.
struct Built {
  JitSubgraph subgraph;
  ShapeSignature signature;
  std::vector<Symbol> symbols;
  std::vector<int> shown;  // the ops to print (not the seeds)
};

Built Build(const OpCase& c, const OpRegistry& registry) {
  Built b;
  b.subgraph.block.set_idx(0);
  b.subgraph.block.set_parent_idx(-1);
  std::map<std::string, int> symbol_of;
  for (const Feed& f : c.feeds) {
    proto::VarDesc* v = b.subgraph.block.add_vars();
    v->set_name(f.name);
    v->set_dtype(ToProto(f.dtype));
    InputSpec in;
    in.dtype = f.dtype;
    std::stringstream dims(f.dims);
    for (std::string d; std::getline(dims, d, ',');) {
      if (d == "N" || d == "S") {
        if (!symbol_of.count(d)) {
          symbol_of[d] = static_cast<int>(b.symbols.size());
          b.symbols.push_back(Symbol{d, {}});
        }
        b.symbols[symbol_of[d]].positions.emplace_back(static_cast<int>(b.signature.inputs.size()),
                                                       static_cast<int>(in.dims.size()));
        in.dims.push_back(d == "N" ? c.n : c.s);
      } else {
        in.dims.push_back(std::stoll(d));
      }
      v->add_dims(in.dims.back());
    }
    b.subgraph.inputs.push_back(f.name);
    b.signature.inputs.push_back(in);
  }
  *b.subgraph.block.add_ops() = c.op;
  b.shown.push_back(0);
  const OpInfo& info = registry.Get(c.op.type());
  if (!info.grad_maker) return b;
  std::set<std::string> written;
  for (const auto& f : c.feeds) written.insert(f.name);
  for (const auto& out : c.op.outputs()) written.insert(out.args().begin(), out.args().end());
  for (const proto::OpDesc& grad : info.grad_maker(c.op)) {
    for (const auto& in : grad.inputs()) {
      for (const std::string& arg : in.args()) {
        const std::string suffix = "@GRAD";
        if (written.count(arg) || arg.size() <= suffix.size() ||
            arg.compare(arg.size() - suffix.size(), suffix.size(), suffix) != 0) {
          continue;
        }
        const std::string of = arg.substr(0, arg.size() - suffix.size());
        *b.subgraph.block.add_ops() = Op("fill_any_like", {{"X", of}}, {{"Out", arg}}).Attr("value", 1.0f).Build();
        written.insert(arg);
      }
    }
    *b.subgraph.block.add_ops() = grad;
    b.shown.push_back(b.subgraph.block.ops_size() - 1);
    for (const auto& out : grad.outputs()) written.insert(out.args().begin(), out.args().end());
  }
  return b;
}

std::string Slots(const google::protobuf::RepeatedPtrField<proto::OpDesc::Slot>& slots,
                  const std::map<std::string, std::string>& shapes) {
  std::string out;
  for (const auto& slot : slots) {
    for (const std::string& arg : slot.args()) {
      if (arg == "@EMPTY@") continue;
      const auto it = shapes.find(arg);
      out += (out.empty() ? "" : ", ") + slot.name() + "=" + arg + " " + (it == shapes.end() ? "?" : it->second);
    }
  }
  return out.empty() ? "-" : out;
}

// The case's text for the golden file; the op types it printed go to `seen`.
std::string CaseText(const OpCase& c, const OpRegistry& registry, std::set<std::string>* seen) {
  const Built b = Build(c, registry);
  std::vector<int64_t> values;
  for (const Symbol& s : b.symbols) values.push_back(s.name == "N" ? c.n : c.s);
  std::string text = "== " + c.op.type() + (c.note.empty() ? "" : " (" + c.note + ")") +
                     (b.symbols.empty() ? "" : " at " + SymbolValuesString(b.symbols, values)) + "\n";
  std::map<std::string, std::string> shapes;
  try {
    for (const SymbolicVar& v : InferSymbolicShapes(b.subgraph, b.signature, b.symbols, registry)) {
      shapes[v.name] = SymbolicVarString(v, b.symbols);
    }
  } catch (const Error& e) {
    return text + "  error: " + e.what() + "\n";
  }
  for (int i : b.shown) {
    const proto::OpDesc& op = b.subgraph.block.ops(i);
    seen->insert(op.type());
    text += "  " + op.type() + "\n    in   " + Slots(op.inputs(), shapes) + "\n    out  " + Slots(op.outputs(), shapes) +
            "\n";
  }
  return text;
}

TEST(SymbolicShapes, EveryOp) {
  const OpRegistry& registry = OpRegistry::Global();
  std::set<std::string> seen;
  std::string text =
      "# Symbolic shape inference for every op: InferSymbolicShapes (compiler/dynamic/symbolic_shapes.h) of each\n"
      "# op with its grad ops, fed dims in N and S. Regenerate with KILN_UPDATE_GOLDEN=1.\n";
  for (const OpCase& c : ForwardCases()) text += CaseText(c, registry, &seen);
  test::ExpectGolden(kGolden, text);
  // The launch ops' shapes come from their compiled objects, not from here.
  const std::set<std::string> elsewhere{"jit_kernel", "jit_launch"};
  for (const std::string& type : registry.Types()) {
    if (elsewhere.count(type)) continue;
    EXPECT_TRUE(seen.count(type)) << type << " has no case in symbolic_shapes_test";
  }
}

// A var whose dim is no polynomial gets its dims at the signature and why;
// one that fits gets its symbolic dims.
TEST(SymbolicShapes, FloorIsReportedNotGuessed) {
  OpCase c = Case(Op("pool2d", {{"X", "x"}}, {{"Out", "out"}}).Attr("ksize", Ints{2, 2}).Attr("strides", Ints{2, 2}),
                  {{"x", "N,4,S,S"}});
  c.s = 5;
  const Built b = Build(c, OpRegistry::Global());
  auto var = [](const Built& built, const std::string& name) {
    for (const SymbolicVar& v : InferSymbolicShapes(built.subgraph, built.signature, built.symbols)) {
      if (v.name == name) return v;
    }
    ADD_FAILURE() << "no var " << name;
    return SymbolicVar{};
  };
  EXPECT_EQ(SymbolicVarString(var(b, "x"), b.symbols), "f32[N,4,S,S]");
  const SymbolicVar out = var(b, "out");
  EXPECT_EQ(out.at_base, (Dims{3, 4, 2, 2}));
  EXPECT_NE(out.why.find("dim 2 is not a polynomial"), std::string::npos) << out.why;
  EXPECT_EQ(SymbolicVarString(var(b, "x@GRAD"), b.symbols), "f32[N,4,S,S]");
  c.s = 6;
  const Built even = Build(c, OpRegistry::Global());
  EXPECT_EQ(SymbolicVarString(var(even, "out"), even.symbols), "f32[N,4,S/2,S/2]");
}

// Shape inference that fails at a probe value names it.
TEST(SymbolicShapes, FailureNamesThePoint) {
  const OpCase c = Case(Op("elementwise_add", {{"X", "x"}, {"Y", "y"}}, {{"Out", "out"}}),
                        {{"x", "N,8"}, {"y", "3,8"}});
  const Built b = Build(c, OpRegistry::Global());
  try {
    InferSymbolicShapes(b.subgraph, b.signature, b.symbols);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shape inference at N=6 failed"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::jit
