// The operator contract: what a registry entry holds and the contexts that
// shape inference and kernels see.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/attribute.h"
#include "framework/error.h"
#include "framework/ew/ew_fragment.h"
#include "framework/onednn/settings.h"
#include "framework/op_desc.h"
#include "framework/scope.h"
#include "framework/tensor.h"

namespace kiln {

struct SlotDef {
  std::string name;
  bool duplicable = false;   // takes several args (sum's X)
  bool dispensable = false;  // may be absent or empty
};

struct AttrDef {
  std::string name;
  AttrKind kind;
  std::optional<Attribute> default_value;  // none: the attribute is required
};

// The one attribute every op type accepts besides its own (Paddle's op_role):
// a STRING saying which pass made the op. recompute_pass sets "recompute" on
// the forward ops it copies into the backward pass, and build_jit_pass keeps
// such copies out of the forward clusters. ResolveAttrs checks its kind and
// leaves it out of the AttrMap: kernels and shape inference never see it.
inline constexpr const char* kOpRoleAttr = "op_role";
inline constexpr const char* kOpRoleRecompute = "recompute";
// The ops append_backward inserts (grad ops, their sums, the gradient seeds,
// data-parallel gradient averages), the optimizer's updates, and learning-rate
// schedules: what a test clone drops (ForTestProgram).
inline constexpr const char* kOpRoleBackward = "backward";
inline constexpr const char* kOpRoleOptimize = "optimize";
inline constexpr const char* kOpRoleLRSched = "lr_sched";
// True when `op` has op_role = `role`.
bool HasOpRole(const proto::OpDesc& op, std::string_view role);

// ---- Shape inference -------------------------------------------------------
// Run at build/validation time over VarDescs (dims may hold -1) and at run time
// over tensors (dims concrete). Violations call Fail(), which throws
// InvalidArgument prefixed with the op's label.
class InferShapeContext {
 public:
  virtual ~InferShapeContext() = default;
  virtual bool IsRuntime() const = 0;
  virtual std::string OpName() const = 0;
  // Number of args of an input slot (0 when absent); an @EMPTY@ arg counts.
  virtual size_t InputCount(std::string_view slot) const = 0;
  // False for an absent slot or an @EMPTY@ arg.
  virtual bool HasInput(std::string_view slot, size_t i = 0) const = 0;
  virtual Dims InputDims(std::string_view slot, size_t i = 0) const = 0;
  virtual DataType InputDtype(std::string_view slot, size_t i = 0) const = 0;
  virtual size_t OutputCount(std::string_view slot) const = 0;
  virtual bool HasOutput(std::string_view slot, size_t i = 0) const = 0;
  // No-ops for absent outputs.
  virtual void SetOutputDims(std::string_view slot, size_t i, const Dims& dims) = 0;
  virtual void SetOutputDtype(std::string_view slot, size_t i, DataType dtype) = 0;
  void SetOutput(std::string_view slot, const Dims& dims, DataType dtype = DataType::kFP32, size_t i = 0) {
    SetOutputDims(slot, i, dims);
    SetOutputDtype(slot, i, dtype);
  }
  virtual const AttrMap& attrs() const = 0;
  template <typename T>
  const T& Attr(const std::string& name) const;

  template <typename... Args>
  [[noreturn]] void Fail(const Args&... args) const {
    ThrowInvalidArgument(OpName(), ": ", args...);
  }
};

// ---- Kernels -----------------------------------------------------------------
struct SlotVars {
  std::string name;
  std::vector<Variable*> vars;  // nullptr for an @EMPTY@ arg
  std::vector<std::string> args;
};

class ExecContext {
 public:
  // `onednn`: the settings of the run the op is part of (the executor's
  // ExecutorOptions::onednn, a compiled cluster's CompileOptions).
  ExecContext(const proto::OpDesc& desc, const AttrMap& attrs, const std::vector<SlotVars>& inputs,
              const std::vector<SlotVars>& outputs, int op_index, const onednn::Settings& onednn)
      : desc_(desc), attrs_(attrs), inputs_(inputs), outputs_(outputs), op_index_(op_index), onednn_(onednn) {}

  const std::string& type() const { return desc_.type(); }
  const proto::OpDesc& desc() const { return desc_; }
  int op_index() const { return op_index_; }
  std::string OpName() const { return OpLabel(desc_, op_index_); }
  // The executor runs with --check_nan_inf: ops that run others (jit_launch)
  // check inside themselves too.
  bool check_nan_inf() const { return check_nan_inf_; }
  void set_check_nan_inf(bool on) { check_nan_inf_ = on; }
  // How the op's oneDNN kernel runs (slow implementations, deterministic
  // primitives, the compute type of matmul and conv2d); ops that run others
  // (jit_launch's fallback) hand it on.
  const onednn::Settings& onednn() const { return onednn_; }

  size_t InputCount(std::string_view slot) const;
  // Throws InvalidArgument naming the op and slot when absent or without data.
  const Tensor& Input(std::string_view slot, size_t i = 0) const;
  // nullptr when the slot is absent, the arg is @EMPTY@ or holds no data.
  const Tensor* InputOrNull(std::string_view slot, size_t i = 0) const;
  // Dims and dtype of an input that may be shape-only (a no-need-buffer input
  // whose buffer the executor released): for kernels that never read its data.
  const Tensor& InputMeta(std::string_view slot, size_t i = 0) const;
  // nullptr when the slot is absent, the arg is @EMPTY@, or it has no shape.
  const Tensor* InputMetaOrNull(std::string_view slot, size_t i = 0) const;
  std::vector<const Tensor*> MultiInput(std::string_view slot) const;
  // The variable of input arg i (for ops that take over an input's buffer,
  // as jit_launch does with inputs that die in it); nullptr when the slot is
  // absent or the arg @EMPTY@.
  Variable* InputVar(std::string_view slot, size_t i = 0) const;
  const std::string& InputName(std::string_view slot, size_t i = 0) const;

  size_t OutputCount(std::string_view slot) const;
  Tensor* Output(std::string_view slot, size_t i = 0) const;
  // nullptr when the slot is absent or the arg is @EMPTY@ (gradient not needed).
  Tensor* OutputOrNull(std::string_view slot, size_t i = 0) const;
  const std::string& OutputName(std::string_view slot, size_t i = 0) const;

  const AttrMap& attrs() const { return attrs_; }
  template <typename T>
  const T& Attr(const std::string& name) const;

  const std::vector<SlotVars>& input_slots() const { return inputs_; }
  const std::vector<SlotVars>& output_slots() const { return outputs_; }

  template <typename... Args>
  [[noreturn]] void Fail(const Args&... args) const {
    ThrowInvalidArgument(OpName(), ": ", args...);
  }

 private:
  const SlotVars* FindSlot(const std::vector<SlotVars>& slots, std::string_view slot) const;
  // The tensor of input arg i of `slot` whatever it holds; nullptr when absent or @EMPTY@.
  const Tensor* InputTensor(std::string_view slot, size_t i) const;

  const proto::OpDesc& desc_;
  const AttrMap& attrs_;
  const std::vector<SlotVars>& inputs_;
  const std::vector<SlotVars>& outputs_;
  int op_index_;
  onednn::Settings onednn_;
  bool check_nan_inf_ = false;
};

// Attribute lookup shared by both contexts; throws when absent or of another kind.
const Attribute& LookupAttr(const AttrMap& attrs, const std::string& name, const std::string& op_name);

template <typename T>
const T& InferShapeContext::Attr(const std::string& name) const {
  const Attribute& a = LookupAttr(attrs(), name, OpName());
  if (!std::holds_alternative<T>(a)) Fail("attribute '", name, "' has kind ", AttrKindName(KindOf(a)));
  return std::get<T>(a);
}
template <typename T>
const T& ExecContext::Attr(const std::string& name) const {
  const Attribute& a = LookupAttr(attrs_, name, OpName());
  if (!std::holds_alternative<T>(a)) Fail("attribute '", name, "' has kind ", AttrKindName(KindOf(a)));
  return std::get<T>(a);
}

using InferShapeFn = std::function<void(InferShapeContext&)>;
using KernelFn = std::function<void(ExecContext&)>;
// A oneDNN kernel returns false when it cannot handle this case (dtype,
// broadcast pattern); the executor then runs the reference kernel.
using OneDnnKernelFn = std::function<bool(ExecContext&)>;
// Returns the grad ops of a forward op (see MakeGradOp).
using GradMakerFn = std::function<std::vector<proto::OpDesc>(const proto::OpDesc&)>;

// How the JIT compiler may lower an op (used from the JIT issue on).
enum class JitLowering {
  kNone,         // runs through the framework kernel only
  kElementwise,  // part of a fused Xbyak elementwise kernel
  kOneDnn,       // a oneDNN anchor primitive (matmul, conv, softmax, ...)
  kReduction,    // reduction (oneDNN reduction or generated)
  kOptimizer,    // parameter update, fusable as elementwise
  kLayout,       // reshape/transpose: a view or a copy; concat/split/slice: their kernels
  kFramework,    // clustered; runs its framework kernel (oneDNN where it has one) there
};
const char* JitLoweringName(JitLowering j);

struct OpInfo {
  std::string type;
  std::string doc;
  std::vector<SlotDef> inputs;
  std::vector<SlotDef> outputs;
  std::vector<AttrDef> attrs;
  InferShapeFn infer_shape;
  KernelFn reference_kernel;
  OneDnnKernelFn onednn_kernel;  // optional
  GradMakerFn grad_maker;        // empty: not differentiable
  // Input slot -> output slot pairs that may share one buffer.
  std::vector<std::pair<std::string, std::string>> inplace;
  JitLowering jit = JitLowering::kNone;
  // The op's elementwise meaning for the JIT (ew_fragment.h): the EwProgram
  // fragments it computes. Set for kElementwise and kOptimizer ops and for
  // reduce_sum/reduce_mean (kReduction) and their grads; empty for every
  // other op.
  EwLoweringFn elementwise;
  // No cluster spans across the op: build_jit_pass puts every op before it
  // (in program order) and every op after it in different clusters. For
  // collectives (c_allreduce_start), so that the work after one overlaps
  // with its communication.
  bool cluster_boundary = false;
  // Inputs through which no gradient flows (labels, learning rate, ...).
  std::vector<std::string> no_grad_inputs;
  // Input slots whose data the kernels never read, only dims and dtype
  // (Paddle's no-need-buffer vars: reshape2_grad's X, elementwise_add_grad's
  // Y, ...). The executor may release such a var's buffer before these ops
  // run; they see it through ExecContext::InputMeta.
  std::vector<std::string> no_need_buffer;
  // For ops whose shape-only inputs depend on the op (jit_launch): returns the
  // input var names read only for their shape. Replaces `no_need_buffer`.
  std::function<std::vector<std::string>(const proto::OpDesc&)> no_need_buffer_vars;

  const SlotDef* FindInput(std::string_view slot) const;
  const SlotDef* FindOutput(std::string_view slot) const;
  const AttrDef* FindAttr(std::string_view name) const;
};

// The conventional grad op: type "<fwd>_grad"; copies the forward inputs listed
// in fwd_inputs and forward outputs in fwd_outputs under their slot names; for
// each slot S in out_grads adds input "S@GRAD" with args a@GRAD; for each input
// slot S in in_grads adds output "S@GRAD" with args a@GRAD; copies all attrs.
proto::OpDesc MakeGradOp(const proto::OpDesc& fwd, const std::vector<std::string>& fwd_inputs,
                         const std::vector<std::string>& fwd_outputs, const std::vector<std::string>& out_grads,
                         const std::vector<std::string>& in_grads);

// The input vars `op` reads only for their dims and dtype: those in its
// no-need-buffer slots that it does not also read as data or write.
std::set<std::string> NoNeedBufferVars(const OpInfo& info, const proto::OpDesc& op);

// Checks the op's slots and attributes against its entry and returns the attrs
// with defaults filled in (op_role, accepted on every op, is checked to be a
// STRING and left out). Throws InvalidArgument naming the op and what is wrong.
AttrMap ResolveAttrs(const OpInfo& info, const proto::OpDesc& op, int op_index);
void CheckSlots(const OpInfo& info, const proto::OpDesc& op, int op_index);

// Runs InferShape on tensors and resizes the outputs (sets dtype too).
void RunInferShape(const OpInfo& info, ExecContext& ctx);

}  // namespace kiln
