#include "framework/onednn/onednn_concat_log_softmax_kernels.h"

#include "framework/onednn/handlers_concat_log_softmax.h"
#include "framework/op_desc.h"
#include "framework/shape_util.h"

namespace kiln {
namespace {

using onednn::AllFp32;

onednn::PrimitiveCache& Cache() { return onednn::PrimitiveCache::Global(); }

// dst = srcs joined along `axis`. oneDNN's concat is out of place: a dst
// sharing a source's buffer falls back.
bool RunConcat(const ExecContext& ctx, const std::vector<const Tensor*>& srcs, int64_t axis, Tensor* dst) {
  std::vector<Dims> dims;
  for (const Tensor* s : srcs) {
    if (s == nullptr || !AllFp32({s}) || dst->IsSharedBufferWith(*s)) return false;
    dims.push_back(s->dims());
  }
  if (dims.empty()) return false;
  onednn::ConcatHandler h(Cache(), ctx.onednn(), dims, axis);
  return h.valid() && h.Run(srcs, dst);
}

bool ConcatKernel(ExecContext& ctx) {
  Tensor* out = ctx.Output("Out");
  const int64_t axis = NormalizeAxis(ctx.Attr<int64_t>("axis"), out->rank(), ctx.OpName());
  return RunConcat(ctx, ctx.MultiInput("X"), axis, out);
}

// split's gradient is the concat of its out-grads when all of them exist.
bool SplitGradKernel(ExecContext& ctx) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (dx == nullptr || ctx.InputCount(GradVarName("Out")) == 0) return false;
  const int64_t axis = NormalizeAxis(ctx.Attr<int64_t>("axis"), dx->rank(), ctx.OpName());
  return RunConcat(ctx, ctx.MultiInput(GradVarName("Out")), axis, dx);
}

bool LogSoftmaxKernel(ExecContext& ctx) {
  const Tensor& x = ctx.Input("X");
  if (!AllFp32({&x})) return false;
  const int64_t axis = NormalizeAxis(ctx.Attr<int64_t>("axis"), x.rank(), ctx.OpName());
  onednn::LogSoftmaxHandler h(Cache(), ctx.onednn(), x.dims(), axis);
  return h.RunForward(x, ctx.Output("Out"));
}

bool LogSoftmaxGradKernel(ExecContext& ctx) {
  const Tensor& out = ctx.Input("Out");
  const Tensor* dout = ctx.InputOrNull(GradVarName("Out"));
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (dout == nullptr || dx == nullptr || !AllFp32({&out, dout}) || dout->dims() != out.dims()) return false;
  const int64_t axis = NormalizeAxis(ctx.Attr<int64_t>("axis"), out.rank(), ctx.OpName());
  onednn::LogSoftmaxHandler h(Cache(), ctx.onednn(), out.dims(), axis);
  return h.RunBackward(out, *dout, dx);
}

}  // namespace

std::vector<std::pair<std::string, OneDnnKernelFn>> ConcatLogSoftmaxOneDnnKernels() {
  return {{"concat", ConcatKernel},
          {"split_grad", SplitGradKernel},
          {"log_softmax", LogSoftmaxKernel},
          {"log_softmax_grad", LogSoftmaxGradKernel}};
}

}  // namespace kiln
