#include "tests/fuzz/random_program.h"

#include <algorithm>
#include <set>

#include "framework/backward.h"
#include "framework/op_desc.h"
#include "framework/optimizer_builder.h"
#include "framework/shape_util.h"
#include "tests/fuzz/random_program_gen.h"

namespace kiln::fuzz {

Gen::Gen(FuzzInput& in) : in_(in), b_(in.Byte()), rng_(in.Byte()) {}

int64_t Gen::RandomDim() {
  static constexpr int64_t kSizes[] = {1, 2, 3, 4, 5, 7, 8, 15, 16, 17};
  return kSizes[in_.Pick(std::size(kSizes))];
}

Dims Gen::RandomDims(int lo, int hi) {
  Dims d(static_cast<size_t>(in_.Int(lo, hi)));
  for (int64_t& x : d) x = RandomDim();
  // Keep programs fast: halve the largest dim until small enough.
  while (Numel(d) > kMaxNumel) {
    auto it = std::max_element(d.begin(), d.end());
    *it = std::max<int64_t>(1, *it / 2);
  }
  return d;
}

GenVar Gen::NewData(const Dims& dims, float lo, float hi) {
  const std::string name = "x" + std::to_string(names_++);
  b_.Data(name, dims, DataType::kFP32, /*stop_gradient=*/in_.Bool());
  Tensor t(DataType::kFP32, dims);
  std::uniform_real_distribution<float> u(lo, hi);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng_);
  out_.feeds.emplace_back(name, std::move(t));
  pool_.push_back({name, dims});
  return pool_.back();
}

std::string Gen::NewIds(const Dims& dims, int64_t bound) {
  const std::string name = "ids" + std::to_string(names_++);
  b_.Data(name, dims, DataType::kINT64);
  Tensor t(DataType::kINT64, dims);
  std::uniform_int_distribution<int64_t> u(0, bound - 1);
  int64_t* p = t.mutable_data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng_);
  out_.feeds.emplace_back(name, std::move(t));
  return name;
}

GenVar Gen::NewParam(const Dims& dims) {
  const std::string name = b_.Param("w" + std::to_string(names_++), dims, Init::Uniform(0.5f));
  pool_.push_back({name, dims});
  return pool_.back();
}

GenVar Gen::Pick() {
  if (pool_.empty()) return NewData(RandomDims(1, 4));
  return pool_[in_.Pick(pool_.size())];
}

GenVar Gen::PickRank(int lo, int hi) {
  std::vector<size_t> fit;
  for (size_t i = 0; i < pool_.size(); ++i) {
    const int r = static_cast<int>(pool_[i].dims.size());
    if (r >= lo && r <= hi) fit.push_back(i);
  }
  // A new input now and then even when the pool has one.
  if (fit.empty() || in_.Int(0, 7) == 0) return NewData(RandomDims(lo, hi));
  return pool_[fit[in_.Pick(fit.size())]];
}

bool Gen::AddOp(const proto::OpDesc& op, const std::vector<std::string>& pool_outputs) {
  try {
    b_.RawOp(op);
  } catch (const Error& e) {
    out_.rejected.push_back(e.what());
    return false;
  }
  out_.families.push_back(family_);
  for (const std::string& v : pool_outputs) pool_.push_back({v, DimsOf(v)});
  return true;
}

std::vector<std::string> Gen::OpN(const std::string& type, const SlotArgsList& inputs,
                                  const std::vector<std::string>& outputs, const AttrMap& attrs,
                                  const std::vector<std::string>& pooled) {
  OpBuilder ob(type);
  for (const auto& [slot, args] : inputs) ob.In(slot, args);
  const std::string base = b_.UniqueName(type);
  std::vector<std::string> names, pool_outputs;
  for (const std::string& slot : outputs) {
    names.push_back(base + "." + slot);
    ob.Out(slot, {names.back()});
    if (std::find(pooled.begin(), pooled.end(), slot) != pooled.end()) pool_outputs.push_back(names.back());
  }
  for (const auto& [name, value] : attrs) ob.Attr(name, value);
  if (!AddOp(ob.Build(), pool_outputs)) return {};
  return names;
}

std::string Gen::Op1(const std::string& type, const SlotArgsList& inputs, const AttrMap& attrs,
                     const std::string& out_slot) {
  const auto names = OpN(type, inputs, {out_slot}, attrs, {out_slot});
  return names.empty() ? "" : names[0];
}

namespace {

// ---- families ---------------------------------------------------------------

void Activation(Gen& g) {
  static const char* kTypes[] = {"relu", "sigmoid", "tanh", "gelu", "exp", "scale", "clip"};
  const std::string type = kTypes[g.in().Pick(std::size(kTypes))];
  const GenVar x = g.Pick();
  AttrMap attrs;
  if (type == "gelu") attrs["approximate"] = g.in().Bool();
  if (type == "scale") {
    attrs["scale"] = g.in().Float(-2.f, 2.f);
    attrs["bias"] = g.in().Float(-1.f, 1.f);
    attrs["bias_after_scale"] = g.in().Bool();
  }
  if (type == "clip") {
    const float lo = g.in().Float(-1.f, 0.5f);
    attrs["min"] = lo;
    attrs["max"] = lo + g.in().Float(0.f, 1.5f);
  }
  g.Op1(type, {{"X", {x.name}}}, attrs);
}

// Y for X: the same dims, X's trailing dims (axis -1) or a middle run of
// them (axis > 0), some dims 1 (broadcast).
void Elementwise(Gen& g) {
  static const char* kTypes[] = {"elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div"};
  const std::string type = kTypes[g.in().Pick(std::size(kTypes))];
  const GenVar x = g.Pick();
  const size_t rank = x.dims.size();
  const size_t start = g.in().Pick(rank);  // Y covers X dims [start, end)
  const size_t end = start + 1 + g.in().Pick(rank - start);
  Dims y(x.dims.begin() + static_cast<std::ptrdiff_t>(start), x.dims.begin() + static_cast<std::ptrdiff_t>(end));
  for (int64_t& d : y) {
    if (g.in().Int(0, 3) == 0) d = 1;
  }
  const int64_t axis = end == rank ? (g.in().Bool() ? -1 : static_cast<int64_t>(start)) : static_cast<int64_t>(start);
  std::string yname;
  if (type == "elementwise_div") {
    yname = g.NewData(y, 0.5f, 2.f).name;  // away from 0
  } else if (start == 0 && end == rank && g.in().Bool()) {
    yname = g.PickRank(static_cast<int>(rank), static_cast<int>(rank)).name;  // often refused unless dims match
  } else {
    yname = g.in().Bool() ? g.NewParam(y).name : g.NewData(y).name;
  }
  g.Op1(type, {{"X", {x.name}}, {"Y", {yname}}}, {{"axis", axis}});
}

void Matmul(Gen& g) {
  const GenVar x = g.PickRank(2, 4);
  const bool tx = g.in().Bool(), ty = g.in().Bool();
  const size_t r = x.dims.size();
  const int64_t k = tx ? x.dims[r - 2] : x.dims[r - 1];
  const int64_t m = tx ? x.dims[r - 1] : x.dims[r - 2];
  std::string y;
  switch (g.in().Pick(3)) {
    case 0: {  // a weight [K, N]
      const int64_t n = g.RandomDim();
      y = g.NewParam(ty ? Dims{n, k} : Dims{k, n}).name;
      break;
    }
    case 1: {  // batched: X's batch dims, some 1
      Dims d(x.dims.begin(), x.dims.end() - 2);
      for (int64_t& b : d) {
        if (g.in().Int(0, 3) == 0) b = 1;
      }
      const int64_t n = g.RandomDim();
      d.push_back(ty ? n : k);
      d.push_back(ty ? k : n);
      y = g.NewData(d).name;
      break;
    }
    default:  // X against itself, as attention scores: [M, K] x [M, K]^T
      y = x.name;
      (void)m;
      return void(g.Op1("matmul", {{"X", {x.name}}, {"Y", {y}}},
                        {{"transpose_X", tx}, {"transpose_Y", !tx}, {"alpha", g.in().Float(0.25f, 2.f)}}));
  }
  g.Op1("matmul", {{"X", {x.name}}, {"Y", {y}}},
        {{"transpose_X", tx}, {"transpose_Y", ty}, {"alpha", g.in().Bool() ? 1.f : g.in().Float(0.25f, 2.f)}});
}

void Reduce(Gen& g) {
  const GenVar x = g.Pick();
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  const size_t which = g.in().Pick(3);
  if (which == 2) {
    g.Op1("mean", {{"X", {x.name}}});
    return;
  }
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d) {
    if (g.in().Bool()) dims.push_back(g.in().Bool() ? d : d - rank);
  }
  if (dims.empty()) dims.push_back(g.in().Int(0, rank - 1));
  g.Op1(which == 0 ? "reduce_sum" : "reduce_mean", {{"X", {x.name}}},
        {{"dim", dims}, {"keep_dim", g.in().Bool()}, {"reduce_all", g.in().Int(0, 7) == 0}});
}

void Softmax(Gen& g) {
  const GenVar x = g.Pick();
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  const char* type = g.in().Bool() ? "softmax" : "log_softmax";
  g.Op1(type, {{"X", {x.name}}}, {{"axis", g.in().Int(-rank, rank - 1)}});
}

// Causal softmax over [..., S, S]: a pool var of that form, or X @ X^T.
void CausalSoftmax(Gen& g) {
  for (const GenVar& v : g.pool()) {
    const size_t r = v.dims.size();
    if (r >= 2 && v.dims[r - 1] == v.dims[r - 2] && g.in().Bool()) {
      g.Op1("fused_softmax_mask_upper_triangle", {{"X", {v.name}}});
      return;
    }
  }
  const GenVar x = g.PickRank(2, 3);
  const std::string s = g.Op1("matmul", {{"X", {x.name}}, {"Y", {x.name}}}, {{"transpose_Y", true}});
  if (!s.empty()) g.Op1("fused_softmax_mask_upper_triangle", {{"X", {s}}});
}

void LayerNorm(Gen& g) {
  const GenVar x = g.PickRank(2, 4);
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  const int64_t begin = g.in().Int(1, rank - 1);
  const int64_t right = Numel(Dims(x.dims.begin() + begin, x.dims.end()));
  SlotArgsList in = {{"X", {x.name}}};
  if (g.in().Bool()) in.push_back({"Scale", {g.NewParam({right}).name}});
  if (g.in().Bool()) in.push_back({"Bias", {g.NewParam({right}).name}});
  g.OpN("layer_norm", in, {"Y", "Mean", "Variance"},
        {{"begin_norm_axis", begin}, {"epsilon", g.in().Bool() ? 1e-5f : 1e-3f}}, {"Y"});
}

void Sum(Gen& g) {
  const GenVar x = g.Pick();
  std::vector<std::string> args = {x.name};
  const int64_t n = g.in().Int(1, 3);
  for (int64_t i = 0; i < n; ++i) {
    switch (g.in().Pick(3)) {
      case 0: args.push_back(x.name); break;
      case 1: args.push_back(g.NewParam(x.dims).name); break;
      default: args.push_back(g.NewData(x.dims).name);
    }
  }
  g.Op1("sum", {{"X", args}});
}

void Dropout(Gen& g) {
  const GenVar x = g.Pick();
  g.OpN("dropout", {{"X", {x.name}}}, {"Out", "Mask"},
        {{"dropout_prob", g.in().Float(0.f, 0.9f)},
         {"is_test", g.in().Int(0, 3) == 0},
         {"seed", g.in().Int(0, 1000)},
         {"dropout_implementation", std::string(g.in().Bool() ? "upscale_in_train" : "downgrade_in_infer")}},
        {"Out"});
}

const std::vector<Family>& Families() {
  static const std::vector<Family> all = [] {
    std::vector<Family> f = {{"activation", Activation}, {"elementwise", Elementwise}, {"matmul", Matmul},
                             {"reduce", Reduce},         {"softmax", Softmax},         {"causal_softmax", CausalSoftmax},
                             {"layer_norm", LayerNorm},   {"sum", Sum},                 {"dropout", Dropout}};
    const auto& layout = LayoutFamilies();
    f.insert(f.end(), layout.begin(), layout.end());
    return f;
  }();
  return all;
}

// The loss: mean of a pool var (through softmax_with_cross_entropy for a
// rank-2 one, sometimes), then append_backward and an optimizer (sgd,
// momentum or adam) updating every parameter in place.
void AddTraining(Gen& g) {
  const GenVar x = g.pool().back();
  std::string loss;
  if (x.dims.size() == 2 && g.in().Bool()) {
    const std::string labels = g.NewIds({x.dims[0], 1}, x.dims[1]);
    const auto outs = g.OpN("softmax_with_cross_entropy", {{"Logits", {x.name}}, {"Label", {labels}}},
                            {"Softmax", "Loss"}, {}, {});
    if (!outs.empty()) loss = g.Op1("mean", {{"X", {outs[1]}}});
  }
  if (loss.empty()) loss = g.Op1("mean", {{"X", {x.name}}});
  if (loss.empty()) return;
  std::vector<std::pair<std::string, std::string>> params;
  try {
    params = AppendBackward(&g.b().main(), loss);
  } catch (const Error&) {
    Finding("append_backward refused a program of differentiable ops");
  }
  OptimizerConfig opt;
  opt.kind = static_cast<OptimizerKind>(g.in().Pick(3));  // sgd, momentum, adam
  opt.use_nesterov = g.in().Bool();
  // Adam's step is lr * m / (sqrt(v) + epsilon): for a gradient that is zero
  // up to rounding (a loss that does not depend on a parameter, such as the
  // mean of an unscaled layer_norm) the default 1e-8 turns noise of 1e-7
  // into a full step whose sign is the noise's. A larger epsilon keeps the
  // same code path and bounds that to 1e-6 (found by this fuzzer: not a JIT
  // bug).
  opt.epsilon = 1e-2f;
  AppendOptimizer(g.b(), params, opt);
  // The updated parameters and their gradients; the optimizer state follows
  // from them.
  for (const auto& [p, grad] : params) {
    g.out().fetches.push_back(p);
    g.out().fetches.push_back(grad);
  }
  g.out().fetches.push_back(loss);
  g.out().backward = true;
}

}  // namespace

const std::vector<std::string>& FamilyNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const Family& f : Families()) n.push_back(f.name);
    return n;
  }();
  return names;
}

RandomProgram BuildRandomProgram(FuzzInput& in) {
  Gen g(in);
  const int64_t ops = in.Int(1, 8);
  const auto& families = Families();
  for (int64_t i = 0; i < ops && in.remaining() > 0; ++i) {
    const Family& f = families[in.Pick(families.size())];
    g.set_family(f.name);
    f.build(g);
  }
  if (g.b().main().blocks(0).ops_size() == 0) return {};
  // Outputs: the vars no op reads (the program's results).
  std::set<std::string> read;
  for (const auto& op : g.b().main().blocks(0).ops()) {
    for (const auto& s : op.inputs()) read.insert(s.args().begin(), s.args().end());
  }
  for (const auto& op : g.b().main().blocks(0).ops()) {
    for (const auto& s : op.outputs()) {
      for (const auto& a : s.args()) {
        if (!read.count(a)) g.out().fetches.push_back(a);
      }
    }
  }
  g.set_family("training");
  if (in.Int(0, 2) == 0) AddTraining(g);
  RandomProgram p = std::move(g.out());
  p.main = g.b().main();
  p.startup = g.b().startup();
  std::sort(p.fetches.begin(), p.fetches.end());
  p.fetches.erase(std::unique(p.fetches.begin(), p.fetches.end()), p.fetches.end());
  return p;
}

}  // namespace kiln::fuzz
