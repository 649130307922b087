#include "framework/program_builder.h"

#include <cmath>

#include "framework/op_desc.h"
#include "framework/validate.h"

namespace kiln {

proto::ProgramDesc EmptyProgram() {
  proto::ProgramDesc p;
  p.set_version(1);
  proto::BlockDesc* b = p.add_blocks();
  b->set_idx(0);
  b->set_parent_idx(-1);
  return p;
}

void TruncateBlock(proto::ProgramDesc* program, int vars, int ops) {
  proto::BlockDesc* b = program->mutable_blocks(0);
  if (vars < 0 || ops < 0 || vars > b->vars_size() || ops > b->ops_size()) {
    ThrowInvalidArgument("truncate: the program has ", b->vars_size(), " vars and ", b->ops_size(),
                         " ops, fewer than the mark (", vars, ", ", ops, ")");
  }
  b->mutable_vars()->DeleteSubrange(vars, b->vars_size() - vars);
  b->mutable_ops()->DeleteSubrange(ops, b->ops_size() - ops);
}

ProgramBuilder::ProgramBuilder(uint64_t seed)
    : seed_(seed), owned_main_(EmptyProgram()), owned_startup_(EmptyProgram()), main_(&owned_main_),
      startup_(&owned_startup_) {}

ProgramBuilder::ProgramBuilder(proto::ProgramDesc* main, proto::ProgramDesc* startup, uint64_t seed)
    : seed_(seed), main_(main), startup_(startup) {
  KILN_CHECK(main_->blocks_size() > 0 && startup_->blocks_size() > 0, "ProgramBuilder: programs without a block");
  for (const auto& op : startup_->blocks(0).ops()) {
    if (op.type() == "uniform_random") ++init_count_;
  }
}

proto::VarDesc* ProgramBuilder::Declare(proto::ProgramDesc& program, const std::string& name, const Dims& dims,
                                        DataType dtype) {
  proto::BlockDesc* b = program.mutable_blocks(0);
  if (FindVarDesc(*b, name) != nullptr) ThrowInvalidArgument("ProgramBuilder: variable '", name, "' declared twice");
  proto::VarDesc* v = b->add_vars();
  v->set_name(name);
  v->set_dtype(ToProto(dtype));
  for (int64_t d : dims) v->add_dims(d);
  return v;
}

void ProgramBuilder::CheckNewPersistable(const std::string& name) const {
  for (const proto::ProgramDesc* p : {main_, startup_}) {
    if (FindVarDesc(p->blocks(0), name) != nullptr) {
      ThrowInvalidArgument("ProgramBuilder: variable '", name, "' declared twice");
    }
  }
}

bool ProgramBuilder::DeclareShared(const std::string& name, const Dims& dims, DataType dtype, bool trainable) {
  if (FindVarDesc(main_->blocks(0), name) != nullptr) {
    ThrowInvalidArgument("'", name, "' is declared twice in this program");
  }
  const proto::VarDesc* shared = FindVarDesc(startup_->blocks(0), name);
  if (shared == nullptr) return false;
  if (VarDims(*shared) != dims || FromProto(shared->dtype()) != dtype) {
    ThrowInvalidArgument("'", name, "' ", DataTypeName(dtype), DimsToString(dims), " clashes with '", name, "' ",
                         DataTypeName(FromProto(shared->dtype())), DimsToString(VarDims(*shared)),
                         " that the startup program already initialises: pick another name");
  }
  proto::VarDesc* v = main_->mutable_blocks(0)->add_vars();
  *v = *shared;
  v->set_stop_gradient(!trainable);
  return true;
}

std::string ProgramBuilder::Data(const std::string& name, const Dims& dims, DataType dtype, bool stop_gradient) {
  Declare(*main_, name, dims, dtype)->set_stop_gradient(stop_gradient);
  return name;
}

std::string ProgramBuilder::Param(const std::string& name, const Dims& dims, const Init& init) {
  CheckNewPersistable(name);
  Declare(*main_, name, dims, DataType::kFP32)->set_persistable(true);
  Declare(*startup_, name, dims, DataType::kFP32)->set_persistable(true);
  params_.push_back(name);
  const std::vector<int64_t> shape(dims.begin(), dims.end());
  proto::OpDesc op;
  if (init.kind == Init::Kind::kConstant) {
    op = OpBuilder("fill_constant").Out("Out", {name}).Attr("shape", shape).Attr("value", init.value).Build();
  } else {
    float limit = init.limit;
    if (init.kind == Init::Kind::kXavierUniform) {
      limit = static_cast<float>(std::sqrt(6.0 / static_cast<double>(init.fan_in + init.fan_out)));
    } else if (init.kind == Init::Kind::kHeUniform) {
      limit = static_cast<float>(std::sqrt(6.0 / static_cast<double>(init.fan_in)));
    }
    // Each parameter draws from its own stream: seed and position, not order of use.
    const int64_t seed = static_cast<int64_t>((seed_ * 1000003ULL + static_cast<uint64_t>(++init_count_)) & 0x7fffffff);
    op = OpBuilder("uniform_random")
             .Out("Out", {name})
             .Attr("shape", shape)
             .Attr("min", -limit)
             .Attr("max", limit)
             .Attr("seed", seed)
             .Build();
  }
  *startup_->mutable_blocks(0)->add_ops() = op;
  return name;
}

std::string ProgramBuilder::Persistable(const std::string& name, const Dims& dims, float value, DataType dtype) {
  CheckNewPersistable(name);
  // State, not a parameter: no gradient flows into it.
  proto::VarDesc* v = Declare(*main_, name, dims, dtype);
  v->set_persistable(true);
  v->set_stop_gradient(true);
  Declare(*startup_, name, dims, dtype)->set_persistable(true);
  const std::vector<int64_t> shape(dims.begin(), dims.end());
  OpBuilder fill("fill_constant");
  fill.Out("Out", {name}).Attr("shape", shape).Attr("value", value);
  // The attribute stays out at its default, so FP32 programs keep their text.
  if (dtype != DataType::kFP32) fill.Attr("dtype", static_cast<int64_t>(ToProto(dtype)));
  *startup_->mutable_blocks(0)->add_ops() = fill.Build();
  return name;
}

std::string ProgramBuilder::UniqueName(const std::string& prefix) {
  const proto::BlockDesc& block = main_->blocks(0);
  auto taken = [&block](const std::string& name) {
    for (const auto& v : block.vars()) {
      const std::string& n = v.name();
      if (n.compare(0, name.size(), name) == 0 && (n.size() == name.size() || n[name.size()] == '.')) return true;
    }
    return false;
  };
  std::string name;
  do {
    name = prefix + "_" + std::to_string(name_counts_[prefix]++);
  } while (taken(name));
  return name;
}

std::vector<std::string> ProgramBuilder::Op(const std::string& type, const SlotArgsList& inputs,
                                            const std::vector<std::string>& outputs, const AttrMap& attrs,
                                            const std::string& prefix) {
  OpBuilder b(type);
  for (const auto& [slot, args] : inputs) b.In(slot, args);
  const std::string base = UniqueName(prefix.empty() ? type : prefix);
  std::vector<std::string> names;
  for (const auto& slot : outputs) {
    names.push_back(outputs.size() == 1 ? base : base + "." + slot);
    b.Out(slot, {names.back()});
  }
  for (const auto& [name, value] : attrs) b.Attr(name, value);
  RawOp(b.Build());
  return names;
}

std::string ProgramBuilder::Op1(const std::string& type, const SlotArgsList& inputs, const AttrMap& attrs,
                                const std::string& out_slot) {
  return Op(type, inputs, {out_slot}, attrs)[0];
}

void ProgramBuilder::RawOp(const proto::OpDesc& op) {
  proto::BlockDesc* b = main_->mutable_blocks(0);
  const int vars_before = b->vars_size();
  *b->add_ops() = op;
  try {
    InferShapeAtBuild(b, b->ops_size() - 1, /*declare_outputs=*/true);
  } catch (...) {
    // A rejected op leaves the program as it was: no op, no declared outputs.
    b->mutable_ops()->RemoveLast();
    b->mutable_vars()->DeleteSubrange(vars_before, b->vars_size() - vars_before);
    throw;
  }
}

Dims ProgramBuilder::VarDimsOf(const std::string& name) const {
  const proto::VarDesc* v = FindVarDesc(main_->blocks(0), name);
  if (v == nullptr) ThrowNotFound("ProgramBuilder: no variable '", name, "'");
  return VarDims(*v);
}

}  // namespace kiln
