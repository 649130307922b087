#include "framework/validate.h"

#include <map>

#include "framework/shape_util.h"
#include "framework/suggest.h"

namespace kiln {
namespace {

// The most elements a declared var may have: far beyond any memory, and
// with room for the byte count of the widest dtype (8 bytes) in int64.
constexpr int64_t kMaxElements = int64_t{1} << 60;

class BuildInferShapeContext final : public InferShapeContext {
 public:
  BuildInferShapeContext(proto::BlockDesc* block, BlockVarIndex* vars, const proto::OpDesc& op, int index,
                         const AttrMap& attrs, bool declare_outputs)
      : block_(block), vars_(vars), op_(op), index_(index), attrs_(attrs), declare_(declare_outputs) {}

  bool IsRuntime() const override { return false; }
  std::string OpName() const override { return OpLabel(op_, index_); }
  size_t InputCount(std::string_view slot) const override { return InputArgs(op_, slot).size(); }
  bool HasInput(std::string_view slot, size_t i) const override {
    auto args = InputArgs(op_, slot);
    return i < args.size() && args[i] != kEmptyVarName;
  }
  Dims InputDims(std::string_view slot, size_t i) const override { return VarDims(InputVar(slot, i)); }
  DataType InputDtype(std::string_view slot, size_t i) const override {
    return FromProto(InputVar(slot, i).dtype());
  }
  size_t OutputCount(std::string_view slot) const override { return OutputArgs(op_, slot).size(); }
  bool HasOutput(std::string_view slot, size_t i) const override {
    auto args = OutputArgs(op_, slot);
    return i < args.size() && args[i] != kEmptyVarName;
  }
  void SetOutputDims(std::string_view slot, size_t i, const Dims& dims) override {
    proto::VarDesc* v = OutputVar(slot, i);
    if (v == nullptr) return;
    if (fresh_.count(v->name())) {
      v->clear_dims();
      for (int64_t d : dims) v->add_dims(d);
      return;
    }
    Dims declared = VarDims(*v);
    if (!DimsCompatible(declared, dims)) {
      Fail("output ", slot, " ('", v->name(), "') is declared ", DimsToString(declared),
           " but the op produces ", DimsToString(dims));
    }
  }
  void SetOutputDtype(std::string_view slot, size_t i, DataType dtype) override {
    proto::VarDesc* v = OutputVar(slot, i);
    if (v == nullptr) return;
    if (fresh_.count(v->name())) {
      v->set_dtype(ToProto(dtype));
      return;
    }
    if (FromProto(v->dtype()) != dtype) {
      Fail("output ", slot, " ('", v->name(), "') is declared ", DataTypeName(FromProto(v->dtype())),
           " but the op produces ", DataTypeName(dtype));
    }
  }
  const AttrMap& attrs() const override { return attrs_; }

 private:
  const proto::VarDesc& InputVar(std::string_view slot, size_t i) const {
    auto args = InputArgs(op_, slot);
    if (i >= args.size() || args[i] == kEmptyVarName) Fail("input ", slot, "[", i, "] is missing");
    const proto::VarDesc* v = vars_->Find(args[i]);
    if (v == nullptr) Fail("input ", slot, ": variable '", args[i], "' is not declared in block ", block_->idx());
    return *v;
  }
  proto::VarDesc* OutputVar(std::string_view slot, size_t i) {
    auto args = OutputArgs(op_, slot);
    if (i >= args.size() || args[i] == kEmptyVarName) return nullptr;
    proto::VarDesc* v = vars_->Find(args[i]);
    if (v != nullptr) return v;
    if (!declare_) Fail("output ", slot, ": variable '", args[i], "' is not declared in block ", block_->idx());
    v = block_->add_vars();
    v->set_name(args[i]);
    fresh_[args[i]] = true;
    return v;
  }

  proto::BlockDesc* block_;
  BlockVarIndex* vars_;
  const proto::OpDesc& op_;
  int index_;
  const AttrMap& attrs_;
  bool declare_;
  std::map<std::string, bool> fresh_;
};

}  // namespace

proto::VarDesc* BlockVarIndex::Find(std::string_view name) {
  for (; indexed_ < block_->vars_size(); ++indexed_) pos_.emplace(block_->vars(indexed_).name(), indexed_);
  auto it = pos_.find(std::string(name));
  return it == pos_.end() ? nullptr : block_->mutable_vars(it->second);
}

void InferShapeAtBuild(proto::BlockDesc* block, int op_index, bool declare_outputs, const OpRegistry& registry) {
  BlockVarIndex index(block);
  InferShapeAtBuild(block, op_index, declare_outputs, registry, &index);
}

void InferShapeAtBuild(proto::BlockDesc* block, int op_index, bool declare_outputs, const OpRegistry& registry,
                       BlockVarIndex* index) {
  const proto::OpDesc& op = block->ops(op_index);
  const OpInfo* info = registry.Find(op.type());
  if (info == nullptr) {
    ThrowNotFound(OpLabel(op, op_index), ": unknown op type '", op.type(), "'", DidYouMean(op.type(), registry.Types()));
  }
  CheckSlots(*info, op, op_index);
  AttrMap attrs = ResolveAttrs(*info, op, op_index);
  // Every input must be a declared var.
  for (const auto& s : op.inputs()) {
    for (const auto& a : s.args()) {
      if (a != kEmptyVarName && index->Find(a) == nullptr) {
        ThrowInvalidArgument(OpLabel(op, op_index), ": input ", s.name(), ": variable '", a,
                             "' is not declared in block ", block->idx());
      }
    }
  }
  if (!info->infer_shape) return;
  // Copy: declaring outputs may grow block->vars but never moves ops.
  BuildInferShapeContext ctx(block, index, op, op_index, attrs, declare_outputs);
  info->infer_shape(ctx);
}

void ValidateProgram(const proto::ProgramDesc& program, const OpRegistry& registry) {
  if (program.blocks_size() == 0) ThrowInvalidArgument("program has no blocks");
  for (const auto& b : program.blocks()) {
    std::map<std::string, int> seen;
    for (const auto& v : b.vars()) {
      if (v.name().empty()) ThrowInvalidArgument("block ", b.idx(), ": a variable has an empty name");
      if (!seen.emplace(v.name(), 1).second) {
        ThrowInvalidArgument("block ", b.idx(), ": variable '", v.name(), "' is declared twice");
      }
      int64_t known = 1;  // product of the known dims
      for (int64_t d : v.dims()) {
        if (d < -1 || d == 0) {
          ThrowInvalidArgument("block ", b.idx(), ": variable '", v.name(), "' has invalid dim ", d,
                               " (dims are positive, or -1 when known only at run time)");
        }
        // Shape inference multiplies dims in int64: a count past this would
        // overflow there (undefined behaviour) long before any allocation.
        if (d > 0 && __builtin_mul_overflow(known, d, &known)) known = kMaxElements + 1;
        if (known > kMaxElements) {
          ThrowInvalidArgument("block ", b.idx(), ": variable '", v.name(), "' has dims ", DimsToString(VarDims(v)),
                               ": more than 2^60 elements");
        }
      }
    }
    // Shape inference runs on a scratch copy so validation never edits the program.
    proto::BlockDesc scratch = b;
    BlockVarIndex index(&scratch);
    for (int i = 0; i < scratch.ops_size(); ++i) {
      InferShapeAtBuild(&scratch, i, /*declare_outputs=*/false, registry, &index);
    }
  }
}

}  // namespace kiln
