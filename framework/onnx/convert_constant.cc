// ONNX ops whose outputs are known at import: Constant, Shape, Size, Range,
// Trilu (computed here: no kiln op computes them) and ConstantOfShape (a
// fill_constant, folded by running it).
#include <cmath>
#include <cstring>

#include "framework/onnx/converter_table.h"
#include "framework/onnx/onnx_tensor.h"

namespace kiln::onnx_import {
namespace {

Tensor Int64s(const Dims& dims, const std::vector<int64_t>& values) {
  Tensor t(DataType::kINT64, dims);
  if (!values.empty()) std::copy(values.begin(), values.end(), t.mutable_data<int64_t>());
  return t;
}

Tensor Floats(const Dims& dims, const std::vector<float>& values) {
  Tensor t(DataType::kFP32, dims);
  if (!values.empty()) std::copy(values.begin(), values.end(), t.mutable_data<float>());
  return t;
}

void ConvertConstant(NodeContext& ctx) {
  if (const onnx::AttributeProto* a = ctx.Attr("value"); a != nullptr && a->has_t()) {
    try {
      ctx.SetConstant(0, TensorFromProto(a->t(), "attribute value"));
    } catch (const OnnxImportError&) {
      throw;
    } catch (const Error& e) {
      ctx.RefuseWith(e.code(), e.what());
    }
    return;
  }
  if (const onnx::AttributeProto* a = ctx.Attr("value_float")) {
    ctx.SetConstant(0, Floats({}, {a->f()}));
  } else if (const onnx::AttributeProto* b = ctx.Attr("value_floats")) {
    ctx.SetConstant(0, Floats({b->floats_size()}, {b->floats().begin(), b->floats().end()}));
  } else if (const onnx::AttributeProto* c = ctx.Attr("value_int")) {
    ctx.SetConstant(0, Int64s({}, {c->i()}));
  } else if (const onnx::AttributeProto* d = ctx.Attr("value_ints")) {
    ctx.SetConstant(0, Int64s({d->ints_size()}, {d->ints().begin(), d->ints().end()}));
  } else {
    ctx.Refuse("its value is a sparse tensor or strings (kiln has dense numeric tensors only)");
  }
}

// The dims [start, end) of the input (opset 15's start/end), all known.
void ConvertShape(NodeContext& ctx) {
  const Dims& x = ctx.InputDims(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  auto clamp = [rank](int64_t v) { return std::min(std::max(v < 0 ? v + rank : v, int64_t{0}), rank); };
  const int64_t start = clamp(ctx.Int("start", 0));
  const int64_t end = clamp(ctx.Int("end", rank));
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) {
    if (x[i] < 0) {
      ctx.Refuse("dim ", i, " of its input ", DimsToString(x),
                 " is known only at run time, and kiln computes shapes at import (give the input shapes)");
    }
    dims.push_back(x[i]);
  }
  ctx.SetConstant(0, Int64s({static_cast<int64_t>(dims.size())}, dims));
}

void ConvertSize(NodeContext& ctx) {
  const Dims& x = ctx.InputDims(0);
  for (int64_t d : x) {
    if (d < 0) ctx.Refuse("its input ", DimsToString(x), " has a dim known only at run time");
  }
  ctx.SetConstant(0, Int64s({}, {Numel(x)}));
}

template <typename T>
Tensor RangeOf(NodeContext& ctx, DataType dtype) {
  const double start = ctx.ConstantScalar(0, "start");
  const double limit = ctx.ConstantScalar(1, "limit");
  const double delta = ctx.ConstantScalar(2, "delta");
  if (delta == 0) ctx.Refuse("delta is 0");
  const double n = std::ceil((limit - start) / delta);
  if (!(n <= static_cast<double>(kMaxFoldedElements))) {
    ctx.Refuse("it would make a constant of ", n, " elements (at most ", kMaxFoldedElements, " are folded)");
  }
  const int64_t count = n > 0 ? static_cast<int64_t>(n) : 0;
  Tensor t(dtype, {count});
  if (count == 0) return t;
  // ONNX's reference: start + i * delta in the input type.
  T* p = t.mutable_data<T>();
  for (int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(static_cast<T>(start) + static_cast<T>(i) * static_cast<T>(delta));
  return t;
}

void ConvertRange(NodeContext& ctx) {
  const Tensor& s = ctx.RequireConstant(0, "start");
  for (size_t i = 1; i < 3; ++i) {
    if (ctx.RequireConstant(i, "limit and delta").dtype() != s.dtype()) ctx.Refuse("inputs of different dtypes");
  }
  switch (s.dtype()) {
    case DataType::kFP32:
      ctx.SetConstant(0, RangeOf<float>(ctx, s.dtype()));
      break;
    case DataType::kFP64:
      ctx.SetConstant(0, RangeOf<double>(ctx, s.dtype()));
      break;
    case DataType::kINT64:
      ctx.SetConstant(0, RangeOf<int64_t>(ctx, s.dtype()));
      break;
    case DataType::kINT32:
      ctx.SetConstant(0, RangeOf<int32_t>(ctx, s.dtype()));
      break;
    default:
      ctx.Refuse("dtype ", DataTypeName(s.dtype()));
  }
}

// fill_constant of the shape (input 0, known at import) with the value
// attribute, when the value is a float exactly (fill_constant's value is).
void ConvertConstantOfShape(NodeContext& ctx) {
  const std::vector<int64_t> shape = ctx.ConstantInts(0, "the shape");
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) ctx.Refuse("the shape ", DimsToString(shape), " has a negative dim");
    if (d > 0 && numel > kMaxFoldedElements / d) {
      ctx.Refuse("the shape ", DimsToString(shape), " would make a constant of more than ", kMaxFoldedElements,
                 " elements");
    }
    numel *= d;
  }
  Tensor value = Floats({1}, {0.0f});
  if (const onnx::AttributeProto* a = ctx.Attr("value"); a != nullptr && a->has_t()) {
    try {
      value = TensorFromProto(a->t(), "attribute value");
    } catch (const OnnxImportError&) {
      throw;
    } catch (const Error& e) {
      ctx.RefuseWith(e.code(), e.what());
    }
  }
  if (value.numel() != 1) ctx.Refuse("attribute value must hold one element");
  double v = 0;
  switch (value.dtype()) {
    case DataType::kFP32:
      v = value.data<float>()[0];
      break;
    case DataType::kFP64:
      v = value.data<double>()[0];
      break;
    case DataType::kINT64:
      v = static_cast<double>(value.data<int64_t>()[0]);
      break;
    case DataType::kINT32:
      v = value.data<int32_t>()[0];
      break;
    default:
      ctx.Refuse("value of dtype ", DataTypeName(value.dtype()), ": fill_constant fills float and integer dtypes");
  }
  if (static_cast<double>(static_cast<float>(v)) != v && std::isfinite(v)) {
    ctx.Refuse("value ", v, " is not a float exactly (fill_constant's value is one)");
  }
  ctx.Op1("fill_constant", {},
          {{"shape", shape}, {"value", static_cast<float>(v)}, {"dtype", static_cast<int64_t>(ToProto(value.dtype()))}},
          ctx.Out(0));
}

// Trilu of a tensor known at import (a causal mask): the upper (j - i >= k)
// or lower (j - i <= k) triangle of each matrix of the last two dims kept,
// the rest zeros. No kiln op computes it; masks are constants in exports.
void ConvertTrilu(NodeContext& ctx) {
  const Tensor& x = ctx.RequireConstant(0, "the input");
  const int64_t k = ctx.HasInput(1) ? static_cast<int64_t>(ctx.ConstantScalar(1, "k")) : 0;
  const bool upper = ctx.Int("upper", 1) != 0;
  if (x.rank() < 2) ctx.Refuse("the input ", DimsToString(x.dims()), " has rank < 2");
  Tensor out(x.dtype(), x.dims());
  if (x.numel() == 0) {
    ctx.SetConstant(0, std::move(out));
    return;
  }
  const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
  const size_t size = SizeOf(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out.raw_mutable_data(x.dtype()));
  for (int64_t e = 0; e < x.numel(); ++e) {
    const int64_t j = e % cols, i = (e / cols) % rows;
    const bool keep = upper ? j - i >= k : j - i <= k;
    if (keep) {
      std::memcpy(dst + e * size, src + e * size, size);
    } else {
      std::memset(dst + e * size, 0, size);  // 0 of every kiln dtype
    }
  }
  ctx.SetConstant(0, std::move(out));
}

Converter FoldOnly(const char* op, int since, ConvertFn fn) {
  Converter c = MakeConverter(op, since, fn);
  c.fold_only = true;
  return c;
}

}  // namespace

void AddConstantConverters(std::vector<Converter>* t) {
  t->push_back(FoldOnly("Constant", 1, ConvertConstant));
  t->push_back(FoldOnly("Shape", 1, ConvertShape));
  t->push_back(FoldOnly("Size", 1, ConvertSize));
  t->push_back(FoldOnly("Range", 11, ConvertRange));
  t->push_back(FoldOnly("Trilu", 14, ConvertTrilu));
  t->push_back(MakeConverter("ConstantOfShape", 9, ConvertConstantOfShape));
}

}  // namespace kiln::onnx_import
