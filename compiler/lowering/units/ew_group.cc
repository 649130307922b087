#include "compiler/lowering/units/ew_group.h"

#include <algorithm>

#include "compiler/codegen/ew_runtime_kernel.h"
#include "framework/ew/ew_resize.h"

namespace kiln::jit {
namespace {

// A bool var is bytes in memory and 0.0/1.0 in the program.
EwElem ElemOf(const Cluster& c, const std::string& var) {
  const proto::DataType d = c.var(var).dtype();
  KILN_CHECK(d == proto::FP32 || d == proto::BOOL, "elementwise group: var '", var, "' has dtype ",
             DataTypeName(FromProto(d)), "; Cluster asks for fragments only when every arg is f32 or bool");
  return d == proto::BOOL ? EwElem::kBool : EwElem::kF32;
}

}  // namespace

EwLayoutOf EwGroupUnit::LayoutOf(const std::vector<Dims>& in_dims, const std::vector<Dims>& out_dims,
                                  std::vector<Dims> var_dims) const {
  for (const Piece& piece : pieces_) {
    if (!piece.fragment.constants_from_dims) continue;
    return [op = piece.op](const std::vector<Dims>&, std::string* why) -> std::optional<EwLayout> {
      if (why != nullptr) *why = "its program holds constants computed from the dims (op #" + std::to_string(op) + ")";
      return std::nullopt;
    };
  }
  auto resizer = std::make_shared<const EwLayoutResizer>(iter_, in_dims, out_dims, std::move(var_dims));
  return [resizer](const std::vector<Dims>& dims, std::string* why) { return resizer->LayoutAt(dims, why); };
}

EwGroupUnit::EwGroupUnit(const std::string& step, Dims iter) : Unit(step, {}, {}, {}), iter_(std::move(iter)) {}

void EwGroupUnit::Add(int op, const EwFragment& f) {
  for (const EwAccess& r : f.reads) {
    reads_.insert(r.var);
    loads_.insert({r.var, r.dims});
  }
  for (const EwAccess& w : f.writes) {
    writes_.insert(w.var);
    if (w.dims == iter_) {
      full_defined_[w.var] = w.dims;
    } else {
      full_defined_.erase(w.var);
    }
  }
  AddOps({op});
  pieces_.push_back({op, f});
}

void EwGroupUnit::StoreAsBf16(const std::string& var) {
  KILN_CHECK(HoldsFull(var), "StoreAsBf16: the group does not hold all of ", var);
  bf16_.insert(var);
  writes_.insert(Bf16CopyOf(var).Name());
}

bool EwGroupUnit::Fits(const EwFragment& f) const {
  size_t loads = loads_.size(), writes = writes_.size();
  for (const EwAccess& r : f.reads) loads += loads_.count({r.var, r.dims}) ? 0 : 1;
  for (const EwAccess& w : f.writes) writes += writes_.count(w.var) ? 0 : 1;
  return loads <= kMaxEwOperands && writes <= kMaxEwOperands;
}

std::string EwGroupUnit::Describe(const Cluster&) const {
  return "generated elementwise kernel over " + DimsToString(iter_);
}

std::vector<EmittedKernel> EwGroupUnit::Emit(EmitContext& ctx) const {
  const Cluster& c = ctx.cluster();
  EwProgram program;
  std::vector<EwAccess> inputs;
  std::map<std::pair<std::string, Dims>, EwValue> loaded;
  std::map<std::string, std::pair<EwValue, Dims>> current;  // latest value of a var in this group
  std::vector<int> ops;
  for (const Piece& piece : pieces_) {
    std::vector<EwValue> in;
    for (const EwAccess& r : piece.fragment.reads) {
      auto cur = current.find(r.var);
      if (cur != current.end() && cur->second.second == r.dims && r.dims == iter_) {
        in.push_back(cur->second.first);
        continue;
      }
      auto it = loaded.find({r.var, r.dims});
      if (it == loaded.end()) {
        it = loaded.emplace(std::make_pair(r.var, r.dims), program.Load(static_cast<int>(inputs.size()))).first;
        inputs.push_back(r);
      }
      in.push_back(it->second);
    }
    const std::vector<EwValue> out = piece.fragment.emit(program, in);
    // An Error, not a KILN_CHECK: the group's ops then lower without it.
    if (out.size() != piece.fragment.writes.size()) {
      ThrowInternal("op #", piece.op, " ", c.type(piece.op), ": its elementwise fragment computes ", out.size(),
                    " values for ", piece.fragment.writes.size(), " writes");
    }
    for (size_t k = 0; k < out.size(); ++k) current[piece.fragment.writes[k].var] = {out[k], piece.fragment.writes[k].dims};
    if (std::find(ops.begin(), ops.end(), piece.op) == ops.end()) ops.push_back(piece.op);
  }
  std::vector<EwAccess> outputs;
  std::vector<Dims> out_var_dims;  // the dims of each output's buffer (a bf16 copy has its var's)
  std::vector<bool> out_bf16;
  std::vector<proto::VarDesc> bf16_vars;
  for (const auto& [var, value] : current) {
    const DerivedBuffer copy = Bf16CopyOf(var);
    if (bf16_.count(var) > 0 && ctx.Stored(copy.Name())) {
      program.Store(static_cast<int>(outputs.size()), value.first);
      outputs.push_back({copy.Name(), value.second});
      out_var_dims.push_back(c.dims(var));
      out_bf16.push_back(true);
      bf16_vars.push_back(copy.Desc(c));
    }
    if (!ctx.Stored(var)) continue;
    program.Store(static_cast<int>(outputs.size()), value.first);
    outputs.push_back({var, value.second});
    out_var_dims.push_back(c.dims(var));
    out_bf16.push_back(false);
  }
  if (outputs.empty()) ThrowInvalidArgument("elementwise group computes nothing that is used");
  std::vector<Dims> in_dims, out_dims;
  for (const auto& i : inputs) in_dims.push_back(i.dims);
  for (const auto& o : outputs) out_dims.push_back(o.dims);
  EwLayout layout = CollapseLayout(iter_, in_dims, out_dims);
  for (size_t k = 0; k < inputs.size(); ++k) layout.inputs[k].elem = ElemOf(c, inputs[k].var);
  for (size_t o = 0; o < outputs.size(); ++o) {
    layout.outputs[o].elem = out_bf16[o] ? EwElem::kBF16 : ElemOf(c, outputs[o].var);
  }
  const Isa isa = c.options().isa;
  auto kernel = std::make_shared<jit::FusedElementwiseKernel>(ctx.KernelName("ew"), program, layout, isa);
  std::vector<std::string> types;
  for (int op : ops) types.push_back(c.type(op));
  kernel->set_fused_ops(types);
  kernel->set_deterministic(c.options().deterministic);
  kernel->Create();
  std::string describe = std::string("generated ") + IsaName(isa) + " kernel, " + std::to_string(program.size()) +
                         " instrs over " + layout.ToString() + " fusing";
  for (const auto& t : types) describe += " " + t;
  EmittedKernel k;
  std::vector<Dims> var_dims;
  for (const auto& i : inputs) var_dims.push_back(c.dims(i.var));
  var_dims.insert(var_dims.end(), out_var_dims.begin(), out_var_dims.end());
  k.kernel = MakeEwRuntimeKernel(kernel, describe, LayoutOf(in_dims, out_dims, std::move(var_dims)));
  for (const auto& i : inputs) k.args.push_back(i.var);
  k.num_inputs = static_cast<int>(inputs.size());
  for (const auto& o : outputs) k.args.push_back(o.var);
  k.new_vars = std::move(bf16_vars);
  return {k};
}

}  // namespace kiln::jit
