// The layout (reshape2, transpose2, concat, split, slice), CNN (conv2d,
// pool2d, batch_norm) and embedding (lookup_table) families of the random
// program generator.
#include <algorithm>
#include <numeric>

#include "framework/op_desc.h"
#include "framework/shape_util.h"
#include "tests/fuzz/random_program_gen.h"

namespace kiln::fuzz {
namespace {

// New dims for X's elements: two neighbours merged, a dim split in two, or
// [d0, -1]; a dim kept in place may be written 0 (copy X's).
void Reshape(Gen& g) {
  const GenVar x = g.Pick();
  Dims d = x.dims;
  switch (g.in().Pick(3)) {
    case 0:
      if (d.size() >= 2) {
        const size_t i = g.in().Pick(d.size() - 1);
        d[i] *= d[i + 1];
        d.erase(d.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      }
      break;
    case 1: {
      const size_t i = g.in().Pick(d.size());
      for (int64_t f : {2, 3, 4, 5, 8}) {
        if (d[i] % f == 0 && d.size() < 5) {
          d[i] /= f;
          d.insert(d.begin() + static_cast<std::ptrdiff_t>(i) + 1, f);
          break;
        }
      }
      break;
    }
    default:
      d = {d[0], -1};
  }
  std::vector<int64_t> shape(d.begin(), d.end());
  for (size_t i = 0; i < shape.size() && i < x.dims.size(); ++i) {
    if (shape[i] == x.dims[i] && g.in().Int(0, 3) == 0) shape[i] = 0;
  }
  if (std::find(shape.begin(), shape.end(), -1) == shape.end() && g.in().Int(0, 3) == 0) {
    shape[g.in().Pick(shape.size())] = -1;
  }
  g.Op1("reshape2", {{"X", {x.name}}}, {{"shape", shape}});
}

void Transpose(Gen& g) {
  const GenVar x = g.PickRank(2, 4);
  std::vector<int64_t> perm(x.dims.size());
  std::iota(perm.begin(), perm.end(), 0);
  for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[g.in().Pick(i)]);
  g.Op1("transpose2", {{"X", {x.name}}}, {{"axis", perm}});
}

void Concat(Gen& g) {
  const GenVar x = g.Pick();
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  const int64_t axis = g.in().Int(-rank, rank - 1);
  std::vector<std::string> args = {x.name};
  const int64_t n = g.in().Int(1, 2);
  for (int64_t i = 0; i < n; ++i) {
    if (g.in().Bool()) {
      args.push_back(x.name);
      continue;
    }
    Dims d = x.dims;
    d[static_cast<size_t>(axis < 0 ? axis + rank : axis)] = g.RandomDim();
    args.push_back(g.in().Bool() ? g.NewParam(d).name : g.NewData(d).name);
  }
  g.Op1("concat", {{"X", args}}, {{"axis", axis}});
}

void Split(Gen& g) {
  const GenVar x = g.Pick();
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  const int64_t axis = g.in().Int(-rank, rank - 1);
  const int64_t dim = x.dims[static_cast<size_t>(axis < 0 ? axis + rank : axis)];
  AttrMap attrs = {{"axis", axis}};
  int64_t parts = 0;
  if (dim % 2 == 0 && g.in().Bool()) {
    parts = dim % 4 == 0 && g.in().Bool() ? 4 : 2;
    attrs["num"] = parts;
  } else {
    std::vector<int64_t> sections;
    for (int64_t left = dim; left > 0;) {
      const int64_t s = g.in().Int(1, left);
      sections.push_back(s);
      left -= s;
    }
    if (g.in().Bool()) sections[g.in().Pick(sections.size())] = -1;
    parts = static_cast<int64_t>(sections.size());
    attrs["sections"] = sections;
  }
  OpBuilder ob("split");
  ob.In("X", {x.name});
  const std::string base = g.b().UniqueName("split");
  std::vector<std::string> outs;
  for (int64_t i = 0; i < parts; ++i) outs.push_back(base + ".out" + std::to_string(i));
  ob.Out("Out", outs);
  for (const auto& [k, v] : attrs) ob.Attr(k, v);
  g.AddOp(ob.Build(), outs);
}

// numpy-style bounds: negative from the end, past the end clamped; an empty
// result is kept out (the generator's ops read it next).
void Slice(Gen& g) {
  const GenVar x = g.Pick();
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  std::vector<int64_t> axes, starts, ends, decrease;
  for (int64_t a = 0; a < rank; ++a) {
    if (!g.in().Bool()) continue;
    const int64_t dim = x.dims[static_cast<size_t>(a)];
    const int64_t start = g.in().Int(0, dim - 1);
    const int64_t end = g.in().Int(start + 1, dim + 2);  // past the end: clamped
    axes.push_back(g.in().Bool() ? a : a - rank);
    starts.push_back(g.in().Bool() ? start : start - dim);
    ends.push_back(end > dim && g.in().Bool() ? 1000 : end);
    if (std::min(end, dim) - start == 1 && g.in().Bool()) decrease.push_back(a);
  }
  if (axes.empty()) {
    axes = {0};
    starts = {0};
    ends = {x.dims[0]};
  }
  g.Op1("slice", {{"Input", {x.name}}},
        {{"axes", axes}, {"starts", starts}, {"ends", ends}, {"decrease_axis", decrease}});
}

// NCHW input: a rank-4 pool var or a new one of small spatial size.
GenVar Image(Gen& g) {
  for (const GenVar& v : g.pool()) {
    if (v.dims.size() == 4 && g.in().Bool()) return v;
  }
  return g.NewData({g.in().Int(1, 3), g.in().Int(1, 6), g.in().Int(3, 9), g.in().Int(3, 9)});
}

void Conv(Gen& g) {
  const GenVar x = Image(g);
  const int64_t c = x.dims[1];
  const int64_t groups = c % 2 == 0 && g.in().Bool() ? 2 : 1;
  const int64_t k = g.in().Int(1, 3);
  const int64_t o = groups * g.in().Int(1, 4);
  const GenVar f = g.NewParam({o, c / groups, k, k});
  const int64_t stride = g.in().Int(1, 2), pad = g.in().Int(0, 1), dil = g.in().Int(1, 2);
  g.Op1("conv2d", {{"Input", {x.name}}, {"Filter", {f.name}}},
        {{"strides", std::vector<int64_t>{stride, stride}},
         {"paddings", std::vector<int64_t>{pad, pad}},
         {"dilations", std::vector<int64_t>{dil, dil}},
         {"groups", groups}},
        "Output");
}

void Pool(Gen& g) {
  const GenVar x = Image(g);
  const int64_t k = g.in().Int(1, 3);
  g.Op1("pool2d", {{"X", {x.name}}},
        {{"pooling_type", std::string(g.in().Bool() ? "max" : "avg")},
         {"ksize", std::vector<int64_t>{k, k}},
         {"strides", std::vector<int64_t>{g.in().Int(1, 2), g.in().Int(1, 2)}},
         {"paddings", std::vector<int64_t>{std::min<int64_t>(g.in().Int(0, 1), k / 2), 0}},
         {"global_pooling", g.in().Int(0, 5) == 0},
         {"exclusive", g.in().Bool()}});
}

// batch_norm over dim 1 with running statistics updated in place.
void BatchNorm(Gen& g) {
  const GenVar x = g.PickRank(2, 4);
  const int64_t c = x.dims[1];
  const GenVar scale = g.NewParam({c});
  const GenVar bias = g.NewParam({c});
  const std::string base = g.b().UniqueName("bn");
  const std::string mean = g.b().Persistable(base + ".mean", {c}, 0.1f);
  const std::string var = g.b().Persistable(base + ".var", {c}, 0.9f);
  const std::string y = base + ".y";
  const bool added = g.AddOp(OpBuilder("batch_norm")
                                 .In("X", {x.name})
                                 .In("Scale", {scale.name})
                                 .In("Bias", {bias.name})
                                 .In("Mean", {mean})
                                 .In("Variance", {var})
                                 .Out("Y", {y})
                                 .Out("MeanOut", {mean})
                                 .Out("VarianceOut", {var})
                                 .Out("SavedMean", {base + ".saved_mean"})
                                 .Out("SavedVariance", {base + ".saved_var"})
                                 .Attr("is_test", g.in().Int(0, 3) == 0)
                                 .Attr("momentum", g.in().Float(0.f, 1.f))
                                 .Attr("epsilon", 1e-5f)
                                 .Build(),
                             {y});
  if (added) {
    g.out().fetches.push_back(mean);
    g.out().fetches.push_back(var);
  }
}

void Embedding(Gen& g) {
  const int64_t vocab = g.in().Int(1, 20);
  const GenVar table = g.NewParam({vocab, g.RandomDim()});
  Dims ids_dims = g.RandomDims(1, 2);
  ids_dims.push_back(1);
  const std::string ids = g.NewIds(ids_dims, vocab);
  g.Op1("lookup_table", {{"W", {table.name}}, {"Ids", {ids}}},
        {{"padding_idx", g.in().Bool() ? int64_t{-1} : g.in().Int(0, vocab - 1)}});
}

}  // namespace

const std::vector<Family>& LayoutFamilies() {
  static const std::vector<Family> f = {{"reshape2", Reshape}, {"transpose2", Transpose}, {"concat", Concat},
                                        {"split", Split},      {"slice", Slice},           {"conv2d", Conv},
                                        {"pool2d", Pool},      {"batch_norm", BatchNorm},  {"lookup_table", Embedding}};
  return f;
}

}  // namespace kiln::fuzz
