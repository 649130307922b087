#include "compiler/compiled_object.h"

#include <sstream>

#include "framework/hash.h"

namespace kiln::jit {

size_t ShapeSignature::Hash() const {
  size_t h = 0;
  HashCombine(h, inputs.size());
  for (const auto& in : inputs) {
    HashCombine(h, static_cast<uint64_t>(in.dtype));
    HashCombineDims(h, in.dims);
  }
  return h;
}

std::string ShapeSignature::ToString() const {
  std::string s = "(";
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i) s += ", ";
    s += std::string(DataTypeName(inputs[i].dtype)) + DimsToString(inputs[i].dims);
  }
  return s + ")";
}

size_t CompileOptions::Hash() const {
  size_t h = 0;
  HashCombine(h, static_cast<uint64_t>(isa));
  HashCombine(h, (use_onednn ? 1u : 0u) | (fuse_elementwise ? 2u : 0u) | (reuse_buffers ? 4u : 0u) |
                     (deterministic ? 8u : 0u) | (allow_slow_impls ? 16u : 0u));
  HashCombine(h, static_cast<uint64_t>(amp_compute));
  return h;
}

const char* DynamicPolicyName(DynamicPolicy p) {
  switch (p) {
    case DynamicPolicy::kOff: return "off";
    case DynamicPolicy::kAuto: return "auto";
    case DynamicPolicy::kOn: return "on";
  }
  return "?";
}

DynamicPolicy ParseDynamicPolicy(const std::string& s) {
  if (s == "off") return DynamicPolicy::kOff;
  if (s == "auto") return DynamicPolicy::kAuto;
  if (s == "on") return DynamicPolicy::kOn;
  ThrowInvalidArgument("--jit_dynamic must be off, auto or on, not '", s, "'");
}

std::optional<std::vector<int64_t>> DynamicShape::Match(const ShapeSignature& sig) const {
  if (sig.inputs.size() != symbolic.inputs.size()) return std::nullopt;
  for (size_t i = 0; i < sig.inputs.size(); ++i) {
    const InputSpec& want = symbolic.inputs[i];
    const InputSpec& got = sig.inputs[i];
    if (want.dtype != got.dtype || want.dims.size() != got.dims.size()) return std::nullopt;
    for (size_t d = 0; d < want.dims.size(); ++d) {
      if (want.dims[d] >= 0 && want.dims[d] != got.dims[d]) return std::nullopt;
    }
  }
  std::vector<int64_t> values;
  for (const Symbol& s : symbols) {
    int64_t v = -1;
    for (const auto& [in, axis] : s.positions) {
      const int64_t d = sig.inputs[in].dims[axis];
      if (v >= 0 && d != v) return std::nullopt;
      v = d;
    }
    values.push_back(v);
  }
  return values;
}

std::string DynamicShape::SignatureString() const {
  std::string s = "(";
  for (size_t i = 0; i < symbolic.inputs.size(); ++i) {
    std::string dims = "[";
    for (size_t d = 0; d < symbolic.inputs[i].dims.size(); ++d) {
      std::string dim = std::to_string(symbolic.inputs[i].dims[d]);
      for (const Symbol& sym : symbols) {
        for (const auto& p : sym.positions) {
          if (p.first == static_cast<int>(i) && p.second == static_cast<int>(d)) dim = sym.name;
        }
      }
      dims += (d ? "," : "") + dim;
    }
    s += (i ? ", " : "") + std::string(DataTypeName(symbolic.inputs[i].dtype)) + dims + "]";
  }
  return s + ")";
}

std::string DynamicShape::SymbolsString(const std::vector<std::string>& input_names) const {
  std::string out;
  for (const Symbol& sym : symbols) {
    out += (out.empty() ? "" : "; ") + sym.name + " = ";
    for (size_t k = 0; k < sym.positions.size(); ++k) {
      if (k == 3) {  // one line however many inputs a cluster has
        out += " and " + std::to_string(sym.positions.size() - k) + " more";
        break;
      }
      const auto [in, axis] = sym.positions[k];
      const std::string name = in < static_cast<int>(input_names.size()) ? input_names[in] : "#" + std::to_string(in);
      out += (k ? ", " : "") + name + " dim " + std::to_string(axis);
    }
  }
  return out;
}

std::string CompiledObject::Listing() const {
  std::ostringstream os;
  const auto& bufs = program.plan.buffers;
  auto buf_name = [&](int b) {
    const auto& info = bufs[b];
    return "%" + std::to_string(b) + ":" + info.name;
  };
  os << "# cluster " << key << " " << signature.ToString() << " isa=" << IsaName(options.isa);
  if (options.amp_compute != ComputeType::kF32) os << " amp_compute=" << ComputeTypeName(options.amp_compute);
  if (options.allow_slow_impls) os << " allow_slow_impls";
  os << "\n";
  if (dynamic) {
    os << "# for every " << dynamic->SignatureString() << " (" << dynamic->SymbolsString(input_names) << ")";
    if (instance_of != 0) {
      os << "; instance of object " << instance_of << " at " << SymbolValuesString(dynamic->symbols, symbol_values);
    }
    os << "\n";
  }
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const auto& ins = program.instructions[i];
    os << i << ": " << ins.kernel->name() << " (";
    for (size_t k = 0; k < ins.args.size(); ++k) {
      if (static_cast<int>(k) == ins.num_inputs) os << (k ? " -> " : "-> ");
      else if (k) os << ", ";
      os << buf_name(ins.args[k]);
    }
    os << ")  # " << ins.kernel->Describe() << "\n";
  }
  os << "# buffers\n";
  for (size_t b = 0; b < bufs.size(); ++b) {
    const auto& info = bufs[b];
    os << "%" << b << " " << info.name << " : " << DataTypeName(info.dtype) << DimsToString(info.dims) << " ";
    if (dynamic && b < dynamic->buffer_dims.size()) {
      const std::string sym = SymDimsToString(dynamic->buffer_dims[b], dynamic->symbols);
      if (sym != DimsToString(info.dims)) os << "= " << DataTypeName(info.dtype) << sym << " ";
    }
    switch (info.role) {
      case runtime::BufferRole::kInput: os << "input " << info.io_index << (info.donatable ? " (dies here)" : ""); break;
      case runtime::BufferRole::kOutput: os << "output " << info.io_index; break;
      case runtime::BufferRole::kTemp:
        if (info.dims_only) {
          os << "dims only (nothing writes it; no memory)";
        } else if (info.view_of >= 0) {
          os << "view of %" << info.view_of;
        } else if (info.region >= 0) {
          const bool in_output = program.plan.buffers[info.region].role == runtime::BufferRole::kOutput;
          os << (in_output ? "in output %" : "in dying input %") << info.region << " +" << info.offset << " ("
             << info.bytes() << " bytes" << (in_output ? ", before the output is written)" : ")");
        } else {
          os << "arena +" << info.offset << " (" << info.bytes() << " bytes)";
        }
        break;
    }
    os << "\n";
  }
  const runtime::BufferPlan& plan = program.plan;
  os << "# arena " << plan.arena_bytes << " bytes planned";
  if (plan.arena_bytes != plan.temp_arena_bytes) {
    os << " (" << plan.temp_arena_bytes << " for temps, the rest kernel scratch)";
  }
  os << ", " << plan.arena_bytes_no_reuse << " without reuse";
  if (plan.scratch_bytes > 0) os << "; kernel scratch up to " << plan.scratch_bytes << " bytes an instruction";
  if (program.plan.donated_bytes > 0) os << "; " << program.plan.donated_bytes << " bytes of temps in dying inputs";
  if (program.plan.output_region_bytes > 0) {
    os << "; " << program.plan.output_region_bytes << " bytes of temps in outputs not written yet";
  }
  os << "\n";
  return os.str();
}

std::shared_ptr<const CompiledObjectAttachment> CompiledObject::Attachment(
    const std::function<std::shared_ptr<const CompiledObjectAttachment>()>& make) const {
  std::lock_guard<std::mutex> lock(attachment_mu_);
  if (!attachment_) attachment_ = make();
  return attachment_;
}

}  // namespace kiln::jit
