// conv2d and pool2d (NCHW) with their grads.
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "framework/op_registry.h"
#include "framework/ops/kernel_util_b.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

using ops_b::DispatchFloat;
using ops_b::Range;
using ops_b::ValidRange;

// Reads an INTS attribute of exactly two entries, each >= min_value.
std::pair<int64_t, int64_t> Pair(const std::string& who, const AttrMap& attrs, const std::string& name,
                                 int64_t min_value) {
  const Attribute& a = LookupAttr(attrs, name, who);
  const auto& v = std::get<std::vector<int64_t>>(a);
  if (v.size() != 2) ThrowInvalidArgument(who, ": attribute '", name, "' needs 2 values, got ", AttrToString(a));
  if (v[0] < min_value || v[1] < min_value) {
    ThrowInvalidArgument(who, ": attribute '", name, "' values must be >= ", min_value, ", got ", AttrToString(a));
  }
  return {v[0], v[1]};
}

// ---- conv2d --------------------------------------------------------------------

struct ConvParams {
  int64_t n, c, h, w;       // Input
  int64_t o, cg, kh, kw;    // Filter (cg = input channels per group)
  int64_t sh, sw, ph, pw, dh, dw, groups;
  int64_t ho, wo;           // Output
};

int64_t ConvOutSize(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation) {
  if (in < 0 || k < 0) return -1;
  const int64_t span = in + 2 * pad - dilation * (k - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

// Validates the shapes (build-time dims may be -1) and fills ConvParams.
ConvParams ConvShape(const std::string& who, const AttrMap& attrs, const Dims& in, const Dims& f) {
  if (in.size() != 4) ThrowInvalidArgument(who, ": input Input: expected rank 4 (NCHW), got ", DimsToString(in));
  if (f.size() != 4) ThrowInvalidArgument(who, ": input Filter: expected rank 4 (OIHW), got ", DimsToString(f));
  ConvParams p;
  std::tie(p.sh, p.sw) = Pair(who, attrs, "strides", 1);
  std::tie(p.ph, p.pw) = Pair(who, attrs, "paddings", 0);
  std::tie(p.dh, p.dw) = Pair(who, attrs, "dilations", 1);
  p.groups = std::get<int64_t>(LookupAttr(attrs, "groups", who));
  if (p.groups < 1) ThrowInvalidArgument(who, ": attribute 'groups' must be >= 1, got ", p.groups);
  p.n = in[0], p.c = in[1], p.h = in[2], p.w = in[3];
  p.o = f[0], p.cg = f[1], p.kh = f[2], p.kw = f[3];
  if (p.c >= 0 && p.c % p.groups != 0) {
    ThrowInvalidArgument(who, ": input channels ", p.c, " of Input ", DimsToString(in), " are not divisible by groups ",
                         p.groups);
  }
  if (p.o >= 0 && p.o % p.groups != 0) {
    ThrowInvalidArgument(who, ": output channels ", p.o, " of Filter ", DimsToString(f),
                         " are not divisible by groups ", p.groups);
  }
  if (p.c >= 0 && p.cg >= 0 && p.c != p.cg * p.groups) {
    ThrowInvalidArgument(who, ": input channels mismatch: Input ", DimsToString(in), " has ", p.c,
                         " channels but Filter ", DimsToString(f), " with groups=", p.groups, " expects ",
                         p.cg * p.groups);
  }
  p.ho = ConvOutSize(p.h, p.kh, p.sh, p.ph, p.dh);
  p.wo = ConvOutSize(p.w, p.kw, p.sw, p.pw, p.dw);
  if (p.ho == 0 || p.wo == 0) {
    ThrowInvalidArgument(who, ": dilated filter ", DimsToString(f), " (dilations [", p.dh, ",", p.dw,
                         "]) is larger than the padded input ", DimsToString(in), " (paddings [", p.ph, ",", p.pw,
                         "])");
  }
  return p;
}

void CheckConvDtypes(const InferShapeContext& ctx) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "Input");
  ops_b::CheckSameDtype(ctx, "Filter", dtype, "Input");
}

void Conv2dInferShape(InferShapeContext& ctx) {
  CheckConvDtypes(ctx);
  const ConvParams p = ConvShape(ctx.OpName(), ctx.attrs(), ctx.InputDims("Input"), ctx.InputDims("Filter"));
  ctx.SetOutput("Output", {p.n, p.o, p.ho, p.wo}, ctx.InputDtype("Input"));
}

void Conv2dGradInferShape(InferShapeContext& ctx) {
  CheckConvDtypes(ctx);
  const ConvParams p = ConvShape(ctx.OpName(), ctx.attrs(), ctx.InputDims("Input"), ctx.InputDims("Filter"));
  const Dims out = {p.n, p.o, p.ho, p.wo};
  if (ctx.HasInput("Output@GRAD") && !DimsCompatible(ctx.InputDims("Output@GRAD"), out)) {
    ctx.Fail("input Output@GRAD: expected dims ", DimsToString(out), ", got ", DimsToString(ctx.InputDims("Output@GRAD")));
  }
  ops_b::SetLike(ctx, "Input@GRAD", "Input");
  ops_b::SetLike(ctx, "Filter@GRAD", "Filter");
}

// Calls fn(in_plane_offset, out_plane_offset, filter_index, rows, cols, row_off, col_off)
// for every (image, output channel, input channel, filter tap); the valid
// output rows/cols of a tap read input row oh*sh + row_off, col ow*sw + col_off.
template <typename Fn>
void ForEachConvTap(const ConvParams& p, Fn&& fn) {
  const int64_t og = p.o / p.groups;
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t oc = 0; oc < p.o; ++oc) {
      const int64_t g = oc / og;
      const int64_t out_plane = (n * p.o + oc) * p.ho * p.wo;
      for (int64_t icg = 0; icg < p.cg; ++icg) {
        const int64_t in_plane = (n * p.c + g * p.cg + icg) * p.h * p.w;
        for (int64_t ki = 0; ki < p.kh; ++ki) {
          const int64_t row_off = ki * p.dh - p.ph;
          const Range rows = ValidRange(p.ho, p.h, p.sh, row_off);
          for (int64_t kj = 0; kj < p.kw; ++kj) {
            const int64_t col_off = kj * p.dw - p.pw;
            const Range cols = ValidRange(p.wo, p.w, p.sw, col_off);
            const int64_t fi = ((oc * p.cg + icg) * p.kh + ki) * p.kw + kj;
            fn(in_plane, out_plane, fi, rows, cols, row_off, col_off);
          }
        }
      }
    }
  }
}

template <typename T>
void Conv2dKernel(ExecContext& ctx) {
  const Tensor& in = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  const ConvParams p = ConvShape(ctx.OpName(), ctx.attrs(), in.dims(), filter.dims());
  const T* x = in.data<T>();
  const T* f = filter.data<T>();
  T* out = ops_b::ZeroFill<T>(ctx.Output("Output"));
  ForEachConvTap(p, [&](int64_t in_plane, int64_t out_plane, int64_t fi, Range rows, Range cols, int64_t row_off,
                        int64_t col_off) {
    const T w = f[fi];
    for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
      // May be negative (left padding); every index actually read is >= 0.
      const int64_t irow = in_plane + (oh * p.sh + row_off) * p.w + col_off;
      T* orow = out + out_plane + oh * p.wo;
      for (int64_t ow = cols.lo; ow < cols.hi; ++ow) orow[ow] += w * x[irow + ow * p.sw];
    }
  });
}

template <typename T>
void Conv2dGradKernel(ExecContext& ctx) {
  const Tensor& in = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  Tensor* din = ctx.OutputOrNull("Input@GRAD");
  Tensor* dfilter = ctx.OutputOrNull("Filter@GRAD");
  T* dx = din ? ops_b::ZeroFill<T>(din) : nullptr;
  T* df = dfilter ? ops_b::ZeroFill<T>(dfilter) : nullptr;
  const Tensor* dout = ctx.InputOrNull("Output@GRAD");
  if (dout == nullptr) return;
  const ConvParams p = ConvShape(ctx.OpName(), ctx.attrs(), in.dims(), filter.dims());
  const T* x = in.data<T>();
  const T* f = filter.data<T>();
  const T* dy = dout->data<T>();
  ForEachConvTap(p, [&](int64_t in_plane, int64_t out_plane, int64_t fi, Range rows, Range cols, int64_t row_off,
                        int64_t col_off) {
    const T w = f[fi];
    T acc = 0;
    for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
      const int64_t irow = in_plane + (oh * p.sh + row_off) * p.w + col_off;
      const T* gorow = dy + out_plane + oh * p.wo;
      if (dx != nullptr) {
        for (int64_t ow = cols.lo; ow < cols.hi; ++ow) dx[irow + ow * p.sw] += w * gorow[ow];
      }
      if (df != nullptr) {
        for (int64_t ow = cols.lo; ow < cols.hi; ++ow) acc += x[irow + ow * p.sw] * gorow[ow];
      }
    }
    if (df != nullptr) df[fi] += acc;
  });
}

std::vector<AttrDef> ConvAttrs() {
  return {{"strides", AttrKind::kInts, Attribute(std::vector<int64_t>{1, 1})},
          {"paddings", AttrKind::kInts, Attribute(std::vector<int64_t>{0, 0})},
          {"dilations", AttrKind::kInts, Attribute(std::vector<int64_t>{1, 1})},
          {"groups", AttrKind::kInt, Attribute(int64_t{1})}};
}

// ---- pool2d --------------------------------------------------------------------

struct PoolParams {
  int64_t n, c, h, w;
  int64_t kh, kw, sh, sw, ph, pw;
  int64_t ho, wo;
  bool is_max, exclusive;
};

PoolParams PoolShape(const std::string& who, const AttrMap& attrs, const Dims& x) {
  if (x.size() != 4) ThrowInvalidArgument(who, ": input X: expected rank 4 (NCHW), got ", DimsToString(x));
  PoolParams p;
  const auto& type = std::get<std::string>(LookupAttr(attrs, "pooling_type", who));
  if (type != "max" && type != "avg") {
    ThrowInvalidArgument(who, ": attribute 'pooling_type' must be \"max\" or \"avg\", got \"", type, "\"");
  }
  p.is_max = type == "max";
  p.exclusive = std::get<bool>(LookupAttr(attrs, "exclusive", who));
  p.n = x[0], p.c = x[1], p.h = x[2], p.w = x[3];
  if (std::get<bool>(LookupAttr(attrs, "global_pooling", who))) {
    // One window over the whole plane; ksize, strides and paddings are
    // ignored, whatever they hold (Paddle's semantics: ksize [0, 0] is fine).
    p.kh = p.h, p.kw = p.w;
    p.sh = p.sw = 1;
    p.ph = p.pw = 0;
    p.ho = p.wo = 1;
    return p;
  }
  std::tie(p.kh, p.kw) = Pair(who, attrs, "ksize", 1);
  std::tie(p.sh, p.sw) = Pair(who, attrs, "strides", 1);
  std::tie(p.ph, p.pw) = Pair(who, attrs, "paddings", 0);
  // Keeps every window overlapping the input, so max is always defined.
  if (p.ph >= p.kh || p.pw >= p.kw) {
    ThrowInvalidArgument(who, ": paddings [", p.ph, ",", p.pw, "] must be smaller than ksize [", p.kh, ",", p.kw,
                         "]");
  }
  p.ho = p.h < 0 ? -1 : (p.h + 2 * p.ph - p.kh) / p.sh + 1;
  p.wo = p.w < 0 ? -1 : (p.w + 2 * p.pw - p.kw) / p.sw + 1;
  if ((p.h >= 0 && p.h + 2 * p.ph < p.kh) || (p.w >= 0 && p.w + 2 * p.pw < p.kw)) {
    ThrowInvalidArgument(who, ": ksize [", p.kh, ",", p.kw, "] is larger than the padded input ", DimsToString(x),
                         " (paddings [", p.ph, ",", p.pw, "])");
  }
  return p;
}

void Pool2dInferShape(InferShapeContext& ctx) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "X");
  const PoolParams p = PoolShape(ctx.OpName(), ctx.attrs(), ctx.InputDims("X"));
  ctx.SetOutput("Out", {p.n, p.c, p.ho, p.wo}, dtype);
}

void Pool2dGradInferShape(InferShapeContext& ctx) {
  const DataType dtype = ops_b::CheckFloatInput(ctx, "X");
  const PoolParams p = PoolShape(ctx.OpName(), ctx.attrs(), ctx.InputDims("X"));
  const Dims out = {p.n, p.c, p.ho, p.wo};
  for (const char* slot : {"Out", "Out@GRAD"}) {
    if (ctx.HasInput(slot) && !DimsCompatible(ctx.InputDims(slot), out)) {
      ctx.Fail("input ", slot, ": expected dims ", DimsToString(out), ", got ", DimsToString(ctx.InputDims(slot)));
    }
  }
  if (ctx.HasOutput("X@GRAD")) ctx.SetOutput("X@GRAD", ctx.InputDims("X"), dtype);
}

// The window of output (oh, ow) clipped to the input: rows [h0,h1), cols [w0,w1).
struct Window {
  int64_t h0, h1, w0, w1;
};
Window PoolWindow(const PoolParams& p, int64_t oh, int64_t ow) {
  const int64_t hs = oh * p.sh - p.ph, ws = ow * p.sw - p.pw;
  return {std::max<int64_t>(hs, 0), std::min(hs + p.kh, p.h), std::max<int64_t>(ws, 0), std::min(ws + p.kw, p.w)};
}

// Index in the plane of the first maximum in row-major order (forward and
// backward agree on it, which is what routes the gradient).
template <typename T>
int64_t ArgMax(const T* plane, const PoolParams& p, const Window& win) {
  int64_t best = win.h0 * p.w + win.w0;
  for (int64_t h = win.h0; h < win.h1; ++h) {
    for (int64_t w = win.w0; w < win.w1; ++w) {
      const T v = plane[h * p.w + w];
      if (v != v) return h * p.w + w;  // the first NaN: max-pool propagates NaN, as in PyTorch
      if (v > plane[best]) best = h * p.w + w;
    }
  }
  return best;
}

template <typename T>
T AvgDivisor(const PoolParams& p, const Window& win) {
  return static_cast<T>(p.exclusive ? (win.h1 - win.h0) * (win.w1 - win.w0) : p.kh * p.kw);
}

template <typename T>
void Pool2dKernel(ExecContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const PoolParams p = PoolShape(ctx.OpName(), ctx.attrs(), xt.dims());
  const T* x = xt.data<T>();
  T* out = ctx.Output("Out")->mutable_data<T>();
  for (int64_t nc = 0; nc < p.n * p.c; ++nc) {
    const T* plane = x + nc * p.h * p.w;
    T* oplane = out + nc * p.ho * p.wo;
    for (int64_t oh = 0; oh < p.ho; ++oh) {
      for (int64_t ow = 0; ow < p.wo; ++ow) {
        const Window win = PoolWindow(p, oh, ow);
        if (p.is_max) {
          oplane[oh * p.wo + ow] = plane[ArgMax(plane, p, win)];
          continue;
        }
        T sum = 0;
        for (int64_t h = win.h0; h < win.h1; ++h) {
          for (int64_t w = win.w0; w < win.w1; ++w) sum += plane[h * p.w + w];
        }
        oplane[oh * p.wo + ow] = sum / AvgDivisor<T>(p, win);
      }
    }
  }
}

template <typename T>
void Pool2dGradKernel(ExecContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (dxt == nullptr) return;
  T* dx = ops_b::ZeroFill<T>(dxt);
  const Tensor* dout = ctx.InputOrNull("Out@GRAD");
  if (dout == nullptr) return;
  const PoolParams p = PoolShape(ctx.OpName(), ctx.attrs(), xt.dims());
  const T* x = xt.data<T>();
  const T* dy = dout->data<T>();
  for (int64_t nc = 0; nc < p.n * p.c; ++nc) {
    const T* plane = x + nc * p.h * p.w;
    T* dplane = dx + nc * p.h * p.w;
    const T* gplane = dy + nc * p.ho * p.wo;
    for (int64_t oh = 0; oh < p.ho; ++oh) {
      for (int64_t ow = 0; ow < p.wo; ++ow) {
        const Window win = PoolWindow(p, oh, ow);
        const T g = gplane[oh * p.wo + ow];
        if (p.is_max) {
          dplane[ArgMax(plane, p, win)] += g;
          continue;
        }
        const T share = g / AvgDivisor<T>(p, win);
        for (int64_t h = win.h0; h < win.h1; ++h) {
          for (int64_t w = win.w0; w < win.w1; ++w) dplane[h * p.w + w] += share;
        }
      }
    }
  }
}

std::vector<AttrDef> PoolAttrs() {
  return {{"pooling_type", AttrKind::kString, Attribute(std::string("max"))},
          {"ksize", AttrKind::kInts, std::nullopt},
          {"strides", AttrKind::kInts, Attribute(std::vector<int64_t>{1, 1})},
          {"paddings", AttrKind::kInts, Attribute(std::vector<int64_t>{0, 0})},
          {"global_pooling", AttrKind::kBool, Attribute(false)},
          {"exclusive", AttrKind::kBool, Attribute(true)}};
}

}  // namespace

void RegisterConvPoolOps(OpRegistry& r) {
  OpInfo conv;
  conv.type = "conv2d";
  conv.doc = "2-D cross-correlation of Input (NCHW) with Filter (OIHW), with strides, paddings, dilations, groups";
  conv.inputs = {{"Input"}, {"Filter"}};
  conv.outputs = {{"Output"}};
  conv.attrs = ConvAttrs();
  conv.infer_shape = Conv2dInferShape;
  conv.reference_kernel = [](ExecContext& ctx) {
    DispatchFloat(ctx, "Input", [&](auto tag) { Conv2dKernel<decltype(tag)>(ctx); });
  };
  conv.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {"Input", "Filter"}, {}, {"Output"}, {"Input", "Filter"})};
  };
  conv.jit = JitLowering::kOneDnn;
  r.Add(std::move(conv));

  OpInfo conv_grad;
  conv_grad.type = "conv2d_grad";
  conv_grad.doc = "Gradients of conv2d w.r.t. Input and Filter";
  conv_grad.inputs = {{"Input"}, {"Filter"}, {"Output@GRAD", false, true}};
  conv_grad.outputs = {{"Input@GRAD", false, true}, {"Filter@GRAD", false, true}};
  conv_grad.attrs = ConvAttrs();
  conv_grad.infer_shape = Conv2dGradInferShape;
  conv_grad.reference_kernel = [](ExecContext& ctx) {
    DispatchFloat(ctx, "Input", [&](auto tag) { Conv2dGradKernel<decltype(tag)>(ctx); });
  };
  conv_grad.jit = JitLowering::kOneDnn;
  r.Add(std::move(conv_grad));

  OpInfo pool;
  pool.type = "pool2d";
  pool.doc = "2-D max or average pooling of X (NCHW); avg with exclusive does not count padding; max propagates NaN";
  pool.inputs = {{"X"}};
  pool.outputs = {{"Out"}};
  pool.attrs = PoolAttrs();
  pool.infer_shape = Pool2dInferShape;
  pool.reference_kernel = [](ExecContext& ctx) {
    DispatchFloat(ctx, "X", [&](auto tag) { Pool2dKernel<decltype(tag)>(ctx); });
  };
  pool.grad_maker = [](const proto::OpDesc& op) {
    return std::vector<proto::OpDesc>{MakeGradOp(op, {"X"}, {"Out"}, {"Out"}, {"X"})};
  };
  pool.jit = JitLowering::kOneDnn;
  r.Add(std::move(pool));

  OpInfo pool_grad;
  pool_grad.type = "pool2d_grad";
  pool_grad.doc = "Gradient of pool2d w.r.t. X (max: to the first maximum of each window in row-major order)";
  pool_grad.inputs = {{"X"}, {"Out"}, {"Out@GRAD", false, true}};
  pool_grad.outputs = {{"X@GRAD", false, true}};
  pool_grad.attrs = PoolAttrs();
  pool_grad.infer_shape = Pool2dGradInferShape;
  pool_grad.reference_kernel = [](ExecContext& ctx) {
    DispatchFloat(ctx, "X", [&](auto tag) { Pool2dGradKernel<decltype(tag)>(ctx); });
  };
  pool_grad.jit = JitLowering::kOneDnn;
  r.Add(std::move(pool_grad));
}

}  // namespace kiln
