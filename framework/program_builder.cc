#include "framework/program_builder.h"

#include <cmath>

#include "framework/op_desc.h"
#include "framework/validate.h"

namespace kiln {

static void InitProgram(proto::ProgramDesc* p) {
  p->set_version(1);
  proto::BlockDesc* b = p->add_blocks();
  b->set_idx(0);
  b->set_parent_idx(-1);
}

ProgramBuilder::ProgramBuilder(uint64_t seed) : seed_(seed) {
  InitProgram(&main_);
  InitProgram(&startup_);
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

std::string ProgramBuilder::Data(const std::string& name, const Dims& dims, DataType dtype, bool stop_gradient) {
  Declare(main_, name, dims, dtype)->set_stop_gradient(stop_gradient);
  return name;
}

std::string ProgramBuilder::Param(const std::string& name, const Dims& dims, const Init& init) {
  Declare(main_, name, dims, DataType::kFP32)->set_persistable(true);
  Declare(startup_, name, dims, DataType::kFP32)->set_persistable(true);
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
  *startup_.mutable_blocks(0)->add_ops() = op;
  return name;
}

std::string ProgramBuilder::Persistable(const std::string& name, const Dims& dims, float value) {
  Declare(main_, name, dims, DataType::kFP32)->set_persistable(true);
  Declare(startup_, name, dims, DataType::kFP32)->set_persistable(true);
  const std::vector<int64_t> shape(dims.begin(), dims.end());
  *startup_.mutable_blocks(0)->add_ops() =
      OpBuilder("fill_constant").Out("Out", {name}).Attr("shape", shape).Attr("value", value).Build();
  return name;
}

std::string ProgramBuilder::UniqueName(const std::string& prefix) {
  return prefix + "_" + std::to_string(name_counts_[prefix]++);
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
  proto::BlockDesc* b = main_.mutable_blocks(0);
  *b->add_ops() = op;
  InferShapeAtBuild(b, b->ops_size() - 1, /*declare_outputs=*/true);
}

Dims ProgramBuilder::VarDimsOf(const std::string& name) const {
  const proto::VarDesc* v = FindVarDesc(main_.blocks(0), name);
  if (v == nullptr) ThrowNotFound("ProgramBuilder: no variable '", name, "'");
  return VarDims(*v);
}

}  // namespace kiln
