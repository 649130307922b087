#include "framework/onnx/integer_folding.h"

#include <functional>

#include "framework/onnx/convert_util.h"

namespace kiln::onnx_import {
namespace {

bool IsInteger(DataType d) { return d == DataType::kINT64 || d == DataType::kINT32; }

int64_t Get(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kINT64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
}

// The flat index into `t` (dims padded to `out`'s rank) of output element i.
int64_t SourceIndex(const Dims& t, const Dims& out, int64_t i) {
  int64_t src = 0, stride = 1;
  for (size_t k = out.size(); k-- > 0;) {
    const int64_t coord = i % out[k];
    i /= out[k];
    const size_t pad = out.size() - t.size();
    if (k >= pad) {
      const int64_t d = t[k - pad];
      src += (d == 1 ? 0 : coord) * stride;
      stride *= d;
    }
  }
  return src;
}

// Unsigned arithmetic: wraps like two's complement without signed overflow.
int64_t Apply(const std::string& op, int64_t a, int64_t b) {
  const uint64_t x = static_cast<uint64_t>(a), y = static_cast<uint64_t>(b);
  if (op == "Add") return static_cast<int64_t>(x + y);
  if (op == "Sub") return static_cast<int64_t>(x - y);
  if (op == "Mul") return static_cast<int64_t>(x * y);
  if (op == "Div") return b == -1 ? static_cast<int64_t>(uint64_t{0} - x) : a / b;  // truncates, as C and ONNX Runtime
  return static_cast<int64_t>(uint64_t{0} - x);  // Neg
}

}  // namespace

bool FoldIntegerArithmetic(const onnx::NodeProto& node, int index, ImportContext& ic) {
  const std::string& op = node.op_type();
  const int arity = op == "Neg" ? 1 : 2;
  if ((op != "Add" && op != "Sub" && op != "Mul" && op != "Div" && op != "Neg") || node.input_size() != arity) return false;
  std::vector<const Tensor*> in;
  for (const std::string& name : node.input()) {
    const Value* v = ic.Find(name);
    if (v == nullptr || v->kind != Value::Kind::kConstant || !IsInteger(v->dtype)) return false;
    in.push_back(v->constant.get());
  }
  NodeContext ctx(ic, node, index);
  if (arity == 2 && in[0]->dtype() != in[1]->dtype()) ctx.Refuse("operands of different dtypes");
  const Dims out_dims = arity == 2 ? BroadcastShapes(ctx, in[0]->dims(), in[1]->dims()) : in[0]->dims();
  Tensor out(in[0]->dtype(), out_dims);
  const int64_t n = Numel(out_dims);
  for (int64_t i = 0; n > 0 && i < n; ++i) {
    const int64_t a = Get(*in[0], SourceIndex(in[0]->dims(), out_dims, i));
    const int64_t b = arity == 2 ? Get(*in[1], SourceIndex(in[1]->dims(), out_dims, i)) : 0;
    if (op == "Div" && b == 0) ctx.Refuse("integer division by zero (element ", i, " of the output)");
    const int64_t v = Apply(op, a, b);
    if (out.dtype() == DataType::kINT64) {
      out.mutable_data<int64_t>()[i] = v;
    } else {
      out.mutable_data<int32_t>()[i] = static_cast<int32_t>(v);
    }
  }
  ctx.SetConstant(0, std::move(out));
  ctx.Commit();
  return true;
}

}  // namespace kiln::onnx_import
