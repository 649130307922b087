// assign_value (Paddle's): a tensor whose values are attributes. The ONNX
// importer's startup program fills every initializer it reads with one.
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "framework/op_desc.h"
#include "framework/op_registry.h"
#include "framework/ops/assign_value_op.h"
#include "framework/ops/kernel_util_a.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

// The attribute that holds the values of each dtype; bools are 0/1 ints
// (AttrDesc has no list of bools), as in Paddle.
const char* ValuesAttr(DataType dtype) {
  switch (dtype) {
    case DataType::kFP32:
      return "fp32_values";
    case DataType::kINT64:
      return "int64_values";
    case DataType::kINT32:
      return "int32_values";
    case DataType::kBOOL:
      return "bool_values";
    default:
      return nullptr;
  }
}

constexpr const char* kValueAttrs[] = {"fp32_values", "int64_values", "int32_values", "bool_values"};

size_t ValuesCount(const AttrMap& attrs, const std::string& name) {
  const Attribute& a = attrs.at(name);
  if (const auto* f = std::get_if<std::vector<float>>(&a)) return f->size();
  return std::get<std::vector<int64_t>>(a).size();
}

DataType DtypeOf(const InferShapeContext& ctx) {
  const int64_t v = ctx.Attr<int64_t>("dtype");
  for (DataType d : {DataType::kFP32, DataType::kINT64, DataType::kINT32, DataType::kBOOL}) {
    if (static_cast<int64_t>(d) == v) return d;
  }
  ctx.Fail("attribute dtype: expected 0 (f32), 1 (i64), 2 (i32) or 4 (bool), got ", v);
}

// The values of the dtype's attribute must fill the shape; the other value
// attributes must be empty (a value in the wrong list is a caller's mistake).
void InferAssignValue(InferShapeContext& ctx) {
  const auto& shape = ctx.Attr<std::vector<int64_t>>("shape");
  for (int64_t d : shape) {
    if (d <= 0) ctx.Fail("attribute shape: expected positive dims, got ", DimsToString(shape));
  }
  const DataType dtype = DtypeOf(ctx);
  const std::string own = ValuesAttr(dtype);
  for (const char* name : kValueAttrs) {
    const size_t n = ValuesCount(ctx.attrs(), name);
    if (name != own && n != 0) {
      ctx.Fail("attribute ", name, ": holds ", n, " values, but dtype is ", DataTypeName(dtype), " (values in ", own,
               ")");
    }
  }
  const size_t n = ValuesCount(ctx.attrs(), own);
  if (static_cast<int64_t>(n) != Numel(shape)) {
    ctx.Fail("attribute ", own, ": shape ", DimsToString(shape), " needs ", Numel(shape), " values, got ", n);
  }
  if (dtype == DataType::kINT32) {
    for (int64_t v : ctx.Attr<std::vector<int64_t>>("int32_values")) {
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        ctx.Fail("attribute int32_values: ", v, " does not fit in int32");
      }
    }
  }
  ctx.SetOutput("Out", shape, dtype);
}

void AssignValueKernel(ExecContext& ctx) {
  Tensor* out = ctx.Output("Out");
  // InferShape has set Out's dims and dtype and checked the value count.
  switch (out->dtype()) {
    case DataType::kFP32: {
      const auto& v = ctx.Attr<std::vector<float>>("fp32_values");
      std::memcpy(out->mutable_data<float>(), v.data(), v.size() * sizeof(float));
      break;
    }
    case DataType::kINT64: {
      const auto& v = ctx.Attr<std::vector<int64_t>>("int64_values");
      std::memcpy(out->mutable_data<int64_t>(), v.data(), v.size() * sizeof(int64_t));
      break;
    }
    case DataType::kINT32: {
      const auto& v = ctx.Attr<std::vector<int64_t>>("int32_values");
      int32_t* p = out->mutable_data<int32_t>();
      for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<int32_t>(v[i]);
      break;
    }
    case DataType::kBOOL: {
      const auto& v = ctx.Attr<std::vector<int64_t>>("bool_values");
      bool* p = out->mutable_data<bool>();
      for (size_t i = 0; i < v.size(); ++i) p[i] = v[i] != 0;
      break;
    }
    default:
      ctx.Fail("output Out: unsupported dtype ", DataTypeName(out->dtype()));
  }
}

}  // namespace

// assign_value's attributes for `t` (f32, i64, i32, bool).
proto::OpDesc AssignValueOp(const std::string& var, const Tensor& t) {
  OpBuilder op("assign_value");
  op.Out("Out", {var}).Attr("shape", std::vector<int64_t>(t.dims().begin(), t.dims().end()));
  op.Attr("dtype", static_cast<int64_t>(ToProto(t.dtype())));
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DataType::kFP32:
      op.Attr("fp32_values", std::vector<float>(t.data<float>(), t.data<float>() + n));
      break;
    case DataType::kINT64:
      op.Attr("int64_values", std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + n));
      break;
    case DataType::kINT32:
      op.Attr("int32_values", std::vector<int64_t>(t.data<int32_t>(), t.data<int32_t>() + n));
      break;
    case DataType::kBOOL:
      op.Attr("bool_values", std::vector<int64_t>(t.data<bool>(), t.data<bool>() + n));
      break;
    default:
      ThrowInvalidArgument("assign_value for '", var, "': holds f32, i64, i32 or bool, not ", DataTypeName(t.dtype()));
  }
  return op.Build();
}

void RegisterAssignValueOps(OpRegistry& r) {
  OpInfo op;
  op.type = "assign_value";
  op.doc =
      "Out = a tensor of attr shape and dtype (0 f32, 1 i64, 2 i32, 4 bool) holding the values of the attribute of "
      "that dtype (fp32_values, int64_values, int32_values, or bool_values as 0/1), row-major; that list must have "
      "one value per element and the others must be empty. The ONNX importer's startup program fills initializers "
      "with it. No inputs, so nothing to differentiate";
  op.outputs = {ops_a::Required("Out")};
  op.attrs = {{"shape", AttrKind::kInts, std::nullopt},
              {"dtype", AttrKind::kInt, Attribute(int64_t{0})},
              {"fp32_values", AttrKind::kFloats, Attribute(std::vector<float>{})},
              {"int64_values", AttrKind::kInts, Attribute(std::vector<int64_t>{})},
              {"int32_values", AttrKind::kInts, Attribute(std::vector<int64_t>{})},
              {"bool_values", AttrKind::kInts, Attribute(std::vector<int64_t>{})}};
  op.infer_shape = InferAssignValue;
  op.reference_kernel = AssignValueKernel;
  op.jit = JitLowering::kFramework;
  r.Add(std::move(op));
}

}  // namespace kiln
