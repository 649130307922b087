#include "framework/onnx/convert_util.h"

#include <algorithm>

namespace kiln::onnx_import {

int64_t NormAxis(const NodeContext& ctx, int64_t axis, int64_t rank, const std::string& what) {
  if (axis < -rank || axis >= rank) ctx.Refuse(what, " ", axis, " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> NormAxes(const NodeContext& ctx, const std::vector<int64_t>& axes, int64_t rank,
                              const std::string& what) {
  std::vector<int64_t> out;
  for (int64_t a : axes) {
    const int64_t n = NormAxis(ctx, a, rank, what);
    if (std::find(out.begin(), out.end(), n) != out.end()) ctx.Refuse(what, " repeat axis ", n);
    out.push_back(n);
  }
  return out;
}

std::string ReshapeTo(NodeContext& ctx, const std::string& var, const Dims& from, const Dims& to,
                      const std::vector<int>& src, const std::string& out) {
  std::vector<int64_t> shape;
  int unknown_moved = 0;
  for (size_t i = 0; i < to.size(); ++i) {
    if (to[i] >= 0) {
      shape.push_back(to[i]);
    } else if (src[i] == static_cast<int>(i) && i < from.size()) {
      shape.push_back(0);  // reshape2's 0: the input's dim at this index
    } else {
      shape.push_back(-1);
      ++unknown_moved;
    }
  }
  if (unknown_moved > 1) {
    ctx.Refuse("reshaping ", DimsToString(from), " to ", DimsToString(to),
               " moves more than one dim known only at run time; give the input shapes (--input_shape)");
  }
  return ctx.Op1("reshape2", {{"X", {var}}}, {{"shape", shape}}, out);
}

Dims BroadcastShapes(const NodeContext& ctx, const Dims& a, const Dims& b) {
  const size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t k = 0; k < r; ++k) {
    const int64_t da = k + a.size() >= r ? a[k + a.size() - r] : 1;
    const int64_t db = k + b.size() >= r ? b[k + b.size() - r] : 1;
    if (da == db || db == 1) {
      out[k] = da;
    } else if (da == 1) {
      out[k] = db;
    } else if (da < 0 || db < 0) {
      out[k] = std::max(da, db);  // the known one; -1 must be it (or 1) at run time
    } else {
      ctx.Refuse("operands ", DimsToString(a), " and ", DimsToString(b), " do not broadcast");
    }
  }
  return out;
}

namespace {

// True when `s`, padded with leading 1s, is `r` (a dim known only at run time
// is taken to be r's).
bool Fits(const Dims& s, const Dims& r) {
  if (s.size() > r.size()) return false;
  const size_t pad = r.size() - s.size();
  for (size_t k = 0; k < r.size(); ++k) {
    const int64_t d = k < pad ? 1 : s[k - pad];
    if (d != r[k] && d >= 0) return false;
  }
  return true;
}

// `var` of dims `s` as a var of rank r.size() (leading 1s).
std::string PadRank(NodeContext& ctx, const std::string& var, const Dims& s, const Dims& r) {
  if (s.size() == r.size()) return var;
  const size_t pad = r.size() - s.size();
  Dims to(pad, 1);
  std::vector<int> src(pad, -1);
  for (size_t k = 0; k < s.size(); ++k) {
    to.push_back(s[k]);
    src.push_back(static_cast<int>(k));
  }
  return ReshapeTo(ctx, var, s, to, src);
}

// `var` (dims `a`) expanded to the broadcast shape `r` of a and b: expand_v2,
// whose -1 keeps a dim of `var`, so a dim known only at run time must be a's.
std::string ExpandTo(NodeContext& ctx, const std::string& var, const Dims& a, const Dims& b, const Dims& r) {
  const size_t pad = r.size() - a.size();
  for (size_t k = 0; k < r.size(); ++k) {
    if (r[k] < 0 && (k < pad || a[k - pad] >= 0)) {
      ctx.Refuse("broadcast: both operands broadcast (", DimsToString(a), " and ", DimsToString(b), " to ",
                 DimsToString(r), "), and dim ", k, " comes from the second operand at run time; kiln expands the "
                 "first operand to a shape known at import");
    }
  }
  return ctx.Op1("expand_v2", {{"X", {var}}}, {{"shape", std::vector<int64_t>(r.begin(), r.end())}});
}

}  // namespace

std::string BroadcastTo(NodeContext& ctx, const std::string& var, const Dims& dims, const Dims& r) {
  if (dims == r) return var;
  return ExpandTo(ctx, var, dims, r, r);
}

BinaryOperands MapBroadcast(NodeContext& ctx, Operands order) {
  return MapBroadcast(ctx, order, ctx.Input(0), ctx.InputDims(0), ctx.Input(1), ctx.InputDims(1));
}

BinaryOperands MapBroadcast(NodeContext& ctx, Operands order, const std::string& a_var, const Dims& a,
                            const std::string& b_var, const Dims& b) {
  const Dims r = BroadcastShapes(ctx, a, b);
  if (Fits(a, r)) return {PadRank(ctx, a_var, a, r), b_var, false};
  if (!Fits(b, r)) return {ExpandTo(ctx, a_var, a, b, r), b_var, false};
  if (order == Operands::kOrdered) {
    ctx.Refuse("broadcast: the first operand ", DimsToString(a), " broadcasts to the second's shape ",
               DimsToString(b), "; kiln's elementwise ops broadcast only their second operand");
  }
  return {PadRank(ctx, b_var, b, r), a_var, true};
}

}  // namespace kiln::onnx_import
