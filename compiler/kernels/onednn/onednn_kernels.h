// oneDNN anchors of the JIT: a matmul or a 2-D convolution with its bias add
// and activation folded into one oneDNN primitive, and a matmul's weight
// gradient with its SGD step.
//
// One oneDNN stack: the primitives are created at compile time, for the
// cluster's concrete shapes, through the framework's handlers and cached in
// onednn::PrimitiveCache::Global() under typed keys (a second kernel of the
// same shapes is a cache hit). A kernel keeps its cached entry and runs it on
// the bound buffers with onednn::ExecuteEntry: scratchpads and reorder
// buffers come from the caching allocator for that one execution.
//
// Resize (runtime::Kernel, for a compiled object serving several shapes)
// makes the kernel again for the new dims, its primitives taken from the
// same cache: created once per shape, then a lookup. What a kernel was made
// under must stay (a matmul's K, weight and bias; a convolution's channels,
// filter and layouts; a batch norm's channels): other dims are refused with
// the reason. compiler/kernels/README.md has the figures, and why not
// oneDNN's run-time dims.
//
// Every maker takes the settings of the compile (CompileOptions::
// OneDnnSettings()): with `deterministic` the primitives are created for one
// OpenMP thread, under keys of their own, and run on one. What a kernel
// multiplies in is its spec's compute type; a slow implementation is taken
// whatever allow_slow_impls says (the dump names it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "compiler/codegen/isa.h"
#include "framework/act_layout.h"
#include "framework/onednn/settings.h"
#include "framework/tensor.h"
#include "runtime/program.h"

namespace kiln::jit {

class FusedElementwiseKernel;

enum class MatmulActivation { kNone, kRelu, kGelu, kGeluTanh };

struct FusedMatmulSpec {
  Dims x_dims;  // [..., M', K]: leading dims fold into M
  Dims w_dims;  // [K, N] (or [N, K] with transpose_w)
  bool transpose_w = false;
  float alpha = 1.f;
  bool bias = false;  // adds a [N] bias row
  MatmulActivation activation = MatmulActivation::kNone;
  // kBF16: bf16 operands (converted by the entry's reorders), f32
  // accumulation, bias, post-ops and Out (onednn::MatmulHandler).
  ComputeType compute = ComputeType::kF32;
  // kBF16 (with compute kBF16): W, X is bound as a bf16 buffer, no reorder.
  DataType w_dtype = DataType::kFP32;
  DataType x_dtype = DataType::kFP32;
};

// Out = act(alpha * X @ W (+ bias)) as one oneDNN matmul.
// Arguments at run time: X, W[, bias] -> Out.
// Throws kiln::Error: kInvalidArgument when the dims do not make a matmul,
// kUnimplemented when oneDNN has no implementation for the spec.
std::shared_ptr<const runtime::Kernel> MakeFusedMatmulKernel(const FusedMatmulSpec& spec,
                                                             const onednn::Settings& settings, const std::string& name);

// W -= lr * X^T @ dY for X [..., K] (leading dims fold into M), dY [..., N],
// W [K, N]: the weight gradient of a matmul and its SGD step as one oneDNN
// matmul (scale -1, sum post-op into W), so the gradient never exists.
// Arguments at run time: X, dY, LearningRate [1], W (read) -> W (written).
// With `keep_old`: X, dY, LearningRate, W -> W_old, W, where W_old receives
// W before the step (so dX can be computed after it, from W_old, and X dies
// here). With `compute` kBF16 the product multiplies bf16 copies of X and
// dY, one of them scaled by lr, and adds into the f32 W: a kernel generated
// for `isa` scales the smaller of the two and rounds it to bf16 in one pass
// (oneDNN's reorder converts the other). Throws kiln::Error as
// MakeFusedMatmulKernel. With `dy_dtype` kBF16 (bf16 compute) dY comes in
// bf16 (made by the kernel that computed it) and is bound as it is; lr then
// scales X.
// The kernel's arguments: X, dY, lr, W (read); [the old W (keep_old)], the
// scaled operand (MatmulSgdScratchOf: lr * X or lr * dY, written and read in
// the run, a temp of the plan), W (written over W as read).
std::shared_ptr<const runtime::Kernel> MakeMatmulSgdKernel(const Dims& x_dims, const Dims& w_dims,
                                                           const onednn::Settings& settings, const std::string& name,
                                                           bool keep_old = false,
                                                           ComputeType compute = ComputeType::kF32,
                                                           Isa isa = HostIsa(), DataType dy_dtype = DataType::kFP32);

// Whether lr scales X (else dY): the smaller of the two, X when dY is bf16.
bool MatmulSgdScalesX(const Dims& x_dims, const Dims& w_dims, DataType dy_dtype = DataType::kFP32);
// The scaled operand's buffer of MakeMatmulSgdKernel: elements and type.
struct MatmulSgdScratch {
  int64_t numel = 0;
  DataType dtype = DataType::kFP32;
};
MatmulSgdScratch MatmulSgdScratchOf(const Dims& x_dims, const Dims& w_dims, ComputeType compute = ComputeType::kF32,
                                    DataType dy_dtype = DataType::kFP32);

// kiln's conv2d (strides, symmetric paddings, dilations with 1 = dense,
// groups), then elementwise_add of a [O] bias at axis 1 and the activation.
struct FusedConvSpec {
  Dims input_dims, filter_dims;  // [N,C,H,W], [O,C/groups,KH,KW]
  Dims strides, paddings, dilations;  // 2 entries each
  int64_t groups = 1;
  bool bias = false;
  MatmulActivation activation = MatmulActivation::kNone;
  // kBF16: bf16 input and filter (converted by the entry's reorders), f32
  // accumulation, bias, post-ops and Output (onednn::ConvHandler).
  ComputeType compute = ComputeType::kF32;
  // The layout Output is bound in without a reorder (framework/act_layout.h:
  // nChw16c pads the channels with zeros).
  ActLayout dst_layout = ActLayout::kPlain;
  // The layout Input (and the gradient's dInput) is bound in without a
  // reorder: a chain keeps it as a batch norm wrote it (f32 compute).
  ActLayout src_layout = ActLayout::kPlain;
  // The layout the gradient's dInput is written in while Input stays plain
  // (src_layout kPlain): a chain keeps the gradient of a plain value for
  // its one reader. kPlain: dInput as Input.
  ActLayout dinput_layout = ActLayout::kPlain;
};

// The layout oneDNN's forward primitive picks for `spec`'s f32 Output when it
// is one a cluster can keep (nChw8c, nChw16c, nhwc); kPlain otherwise.
ActLayout ConvForwardDstLayout(const FusedConvSpec& spec, const onednn::Settings& settings);
// Likewise for its f32 Input (kPlain under bf16 compute).
ActLayout ConvForwardSrcLayout(const FusedConvSpec& spec, const onednn::Settings& settings);
// The layout oneDNN's data gradient picks for `spec`'s f32 dInput when Input
// stays plain, if a cluster can keep it; kPlain otherwise.
ActLayout ConvBackwardDInputLayout(const FusedConvSpec& spec, const onednn::Settings& settings);

// The gradients of a conv2d (and of the bias added after it): `conv` gives
// the shapes, groups and compute type; dY comes in `conv.dst_layout`, as
// `dy_dtype` (bf16 only under bf16 compute). Arguments at run time: Input, Filter, dY -> [dInput,] dFilter
// [, dBias], dInput when `want_dinput`, dBias when `want_dbias` (oneDNN's
// weights backward sums it in the same pass).
std::shared_ptr<const runtime::Kernel> MakeConvGradKernel(const FusedConvSpec& conv, bool want_dinput, bool want_dbias,
                                                          const onednn::Settings& settings, const std::string& name,
                                                          DataType dy_dtype = DataType::kFP32);

// One oneDNN convolution with the bias and activation fused. Arguments at run
// time: Input, Filter[, Bias] -> Output [N,O,OH,OW], plain NCHW/OIHW buffers
// except Output in spec.dst_layout; the cached entry's reorders move them to
// and from the primitive's layouts. Throws kiln::Error: kInvalidArgument when the
// dims do not make a convolution, kUnimplemented when oneDNN has no
// implementation.
std::shared_ptr<const runtime::Kernel> MakeFusedConvKernel(const FusedConvSpec& spec, const onednn::Settings& settings,
                                                           const std::string& name);

// [N, C, H, W] of an activation with C channels whose buffer, kept in
// `layout`, has the dims `stored` (the inverse of ActStoredDims); empty when
// `stored` is no such buffer. For the Resize of kernels on kept activations.
Dims KeptLogicalDims(ActLayout layout, const Dims& stored, int64_t c);

// The bf16 conversion the lowering makes: x[0, n) rounded to bf16 (times a
// scale read at run time, a [1] second input, when `scaled`), as one kernel
// generated for `isa` (compiler/codegen/ew_codegen.h), created. The matmul
// sgd kernel scales its smaller operand with it; bf16_weight_copies copies
// a weight with it. Throws kiln::Error as FusedElementwiseKernel::Create.
std::unique_ptr<FusedElementwiseKernel> MakeToBf16Kernel(int64_t n, bool scaled, Isa isa, const std::string& name);

}  // namespace kiln::jit
