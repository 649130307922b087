#include "framework/ew/ew_layout.h"

#include <algorithm>
#include <sstream>

#include "framework/error.h"

namespace kiln {

const char* EwElemName(EwElem e) {
  switch (e) {
    case EwElem::kF32: return "f32";
    case EwElem::kBF16: return "bf16";
    case EwElem::kBool: return "bool";
  }
  return "?";
}

int64_t EwLayout::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= dims[d];
  return n;
}

bool EwLayout::IsReduction(int output) const {
  const EwOutput& o = outputs[output];
  for (int d = 0; d < rank; ++d) {
    if (dims[d] > 1 && o.strides[d] == 0) return true;
  }
  return false;
}

bool EwLayout::IsInnerReduction(int output) const {
  return dims[rank - 1] > 1 && outputs[output].strides[rank - 1] == 0;
}

namespace {

int64_t Extent(const EwLayout& layout, const EwOperand& op) {
  int64_t extent = 1;
  for (int d = 0; d < layout.rank; ++d) {
    if (layout.dims[d] == 0) {
      if (op.strides[d] != 0) return 0;
      continue;
    }
    extent += (layout.dims[d] - 1) * op.strides[d];
  }
  return extent;
}

std::string StridesToString(const EwLayout& layout, const EwOperand& op) {
  std::ostringstream os;
  os << "[";
  for (int d = 0; d < layout.rank; ++d) os << (d ? "," : "") << op.strides[d];
  os << "]";
  if (op.elem != EwElem::kF32) os << ":" << EwElemName(op.elem);
  return os.str();
}

}  // namespace

int64_t EwLayout::InputExtent(int input) const { return Extent(*this, inputs[input]); }
int64_t EwLayout::OutputExtent(int output) const { return Extent(*this, outputs[output]); }

std::string EwLayout::ToString() const {
  std::ostringstream os;
  os << "dims=[";
  for (int d = 0; d < rank; ++d) os << (d ? "," : "") << dims[d];
  os << "]";
  for (size_t k = 0; k < inputs.size(); ++k) os << " in" << k << "=" << StridesToString(*this, inputs[k]);
  for (size_t k = 0; k < outputs.size(); ++k) {
    os << " out" << k << "=" << StridesToString(*this, outputs[k]) << (IsReduction(static_cast<int>(k)) ? "+" : "");
  }
  return os.str();
}

void EwLayout::Validate() const {
  if (rank < 1 || rank > kEwMaxRank) ThrowInvalidArgument("ew layout: rank must be in [1,", kEwMaxRank, "], got ", rank);
  for (int d = 0; d < rank; ++d) {
    if (dims[d] < 0) ThrowInvalidArgument("ew layout: dim ", d, " is negative: ", ToString());
  }
  if (outputs.empty()) ThrowInvalidArgument("ew layout: no outputs: ", ToString());
  auto check = [&](const EwOperand& op, const char* kind, size_t k) {
    for (int d = 0; d < rank; ++d) {
      if (op.strides[d] < 0) ThrowInvalidArgument("ew layout: ", kind, k, " has a negative stride: ", ToString());
    }
    if (op.strides[rank - 1] > 1) {
      ThrowInvalidArgument("ew layout: ", kind, k, " inner stride must be 0 or 1: ", ToString());
    }
  };
  for (size_t k = 0; k < inputs.size(); ++k) check(inputs[k], "in", k);
  for (size_t k = 0; k < outputs.size(); ++k) {
    check(outputs[k], "out", k);
    if (outputs[k].elem != EwElem::kF32 && IsReduction(static_cast<int>(k))) {
      ThrowInvalidArgument("ew layout: out", k, " is a reduction and ", EwElemName(outputs[k].elem),
                           "; sums are kept in f32: ", ToString());
    }
  }
}

namespace {

// Every operand has the iteration rank and broadcasts to the iteration dims.
void CheckOperandDims(const Dims& iter_dims, const std::vector<const Dims*>& operands, size_t num_inputs) {
  const size_t rank = iter_dims.size();
  for (size_t k = 0; k < operands.size(); ++k) {
    const bool is_input = k < num_inputs;
    const size_t idx = is_input ? k : k - num_inputs;
    const Dims& od = *operands[k];
    if (od.size() != rank) {
      ThrowInvalidArgument("ew layout: ", is_input ? "input " : "output ", idx, " dims ", DimsToString(od),
                           " must have the iteration rank ", rank, " (iteration dims ", DimsToString(iter_dims),
                           ")");
    }
    for (size_t d = 0; d < rank; ++d) {
      if (od[d] != iter_dims[d] && od[d] != 1) {
        ThrowInvalidArgument("ew layout: ", is_input ? "input " : "output ", idx, " dims ", DimsToString(od),
                             " do not broadcast to iteration dims ", DimsToString(iter_dims));
      }
    }
  }
}

}  // namespace

namespace {

std::vector<const Dims*> Operands(const std::vector<Dims>& input_dims, const std::vector<Dims>& output_dims) {
  std::vector<const Dims*> operands;
  for (const Dims& d : input_dims) operands.push_back(&d);
  for (const Dims& d : output_dims) operands.push_back(&d);
  return operands;
}

}  // namespace

EwCollapse CollapseOf(const Dims& iter_dims, const std::vector<Dims>& input_dims,
                      const std::vector<Dims>& output_dims) {
  const size_t rank = iter_dims.size();
  const std::vector<const Dims*> operands = Operands(input_dims, output_dims);
  CheckOperandDims(iter_dims, operands, input_dims.size());
  int64_t numel = 1;
  for (int64_t d : iter_dims) {
    if (d < 0) ThrowInvalidArgument("ew layout: iteration dims must be known, got ", DimsToString(iter_dims));
    numel *= d;
  }

  // Per kept dim: its size and every operand's element stride (0 where the
  // operand has size 1 there).
  struct Dim {
    int64_t size;
    std::vector<int64_t> strides;
  };
  EwCollapse c;
  c.dim_of.assign(rank, -1);
  std::vector<Dim> merged;
  for (size_t d = 0; d < rank; ++d) {
    if (iter_dims[d] == 1) continue;
    Dim dim{iter_dims[d], {}};
    for (const Dims* od : operands) {
      int64_t stride = 1;
      for (size_t e = d + 1; e < rank; ++e) stride *= (*od)[e];
      dim.strides.push_back((*od)[d] == 1 ? 0 : stride);
    }
    // Merge d into the dim before when every operand walks both as one dim.
    // A size-0 dim never merges (the extents of reduction outputs must survive).
    if (!merged.empty() && numel != 0) {
      Dim& prev = merged.back();
      bool same = true;
      for (size_t k = 0; k < operands.size(); ++k) same &= prev.strides[k] == dim.strides[k] * dim.size;
      if (same) {
        prev.size *= dim.size;
        prev.strides = dim.strides;
        c.dim_of[d] = static_cast<int>(merged.size()) - 1;
        continue;
      }
    }
    c.dim_of[d] = static_cast<int>(merged.size());
    merged.push_back(std::move(dim));
  }
  if (merged.size() > static_cast<size_t>(kEwMaxRank)) {
    std::ostringstream os;
    for (size_t k = 0; k < operands.size(); ++k) os << " " << DimsToString(*operands[k]);
    ThrowUnimplemented("ew layout: iteration dims ", DimsToString(iter_dims), " with operands", os.str(),
                       " collapse to ", merged.size(), " dims, more than ", kEwMaxRank);
  }
  c.rank = static_cast<int>(merged.size());
  c.walks.assign(operands.size(), std::vector<bool>(merged.size(), false));
  for (size_t d = 0; d < rank; ++d) {
    if (c.dim_of[d] < 0) continue;
    for (size_t k = 0; k < operands.size(); ++k) c.walks[k][c.dim_of[d]] = (*operands[k])[d] != 1;
  }
  return c;
}

namespace {

// Why `iter_dims` and the operands do not fit `c`, or "".
std::string CollapseMismatch(const EwCollapse& c, const Dims& iter_dims, const std::vector<const Dims*>& operands,
                             size_t num_inputs) {
  std::ostringstream os;
  const size_t rank = c.dim_of.size();
  if (iter_dims.size() != rank || operands.size() != c.walks.size()) {
    os << "laid out for " << rank << " iteration dims and " << c.walks.size() << " operands, got "
       << DimsToString(iter_dims) << " and " << operands.size();
    return os.str();
  }
  for (size_t d = 0; d < rank; ++d) {
    if (iter_dims[d] < 0) return "iteration dims " + DimsToString(iter_dims) + " are not known";
    if (c.dim_of[d] < 0 && iter_dims[d] != 1) {
      os << "iteration dim " << d << " was 1 (no loop) and is " << iter_dims[d];
      return os.str();
    }
  }
  for (size_t k = 0; k < operands.size(); ++k) {
    const Dims& od = *operands[k];
    const bool in = k < num_inputs;
    const std::string name = (in ? "input " : "output ") + std::to_string(in ? k : k - num_inputs);
    if (od.size() != rank) return name + " dims " + DimsToString(od) + " do not have the iteration rank";
    for (size_t d = 0; d < rank; ++d) {
      // A dropped dim is 1 (checked above) in every operand too.
      const bool walks = c.dim_of[d] >= 0 && c.walks[k][c.dim_of[d]];
      if (od[d] != (walks ? iter_dims[d] : 1)) {
        os << name << " dims " << DimsToString(od) << " at dim " << d << ": expected "
           << (walks ? "the iteration dim " + std::to_string(iter_dims[d]) : std::string("1 (broadcast / summed)"))
           << " in iteration dims " << DimsToString(iter_dims);
        return os.str();
      }
    }
  }
  return "";
}

}  // namespace

bool ApplyCollapse(const EwCollapse& c, const Dims& iter_dims, const std::vector<Dims>& input_dims,
                   const std::vector<Dims>& output_dims, EwLayout* layout, std::string* why) {
  const std::vector<const Dims*> operands = Operands(input_dims, output_dims);
  const std::string mismatch = CollapseMismatch(c, iter_dims, operands, input_dims.size());
  if (!mismatch.empty()) {
    if (why != nullptr) *why = "ew layout: " + mismatch;
    return false;
  }
  *layout = EwLayout();
  layout->inputs.resize(input_dims.size());
  layout->outputs.resize(output_dims.size());
  if (c.rank == 0) return true;  // one point: rank 1, dims [1], strides 0
  layout->rank = c.rank;
  const size_t rank = iter_dims.size();
  for (int g = 0; g < c.rank; ++g) layout->dims[g] = 1;
  std::vector<size_t> last(static_cast<size_t>(c.rank), 0);  // the innermost iteration dim of each layout dim
  for (size_t d = 0; d < rank; ++d) {
    if (c.dim_of[d] < 0) continue;
    layout->dims[c.dim_of[d]] *= iter_dims[d];
    last[c.dim_of[d]] = d;
  }
  for (size_t k = 0; k < operands.size(); ++k) {
    EwOperand& op = k < input_dims.size() ? layout->inputs[k] : layout->outputs[k - input_dims.size()];
    for (int g = 0; g < c.rank; ++g) {
      if (!c.walks[k][g]) continue;
      // Sizes 0 count as 1: a walked dim keeps a nonzero stride when the
      // space is empty (nothing is walked then; extents stay 0).
      int64_t stride = 1;
      for (size_t e = last[g] + 1; e < rank; ++e) stride *= std::max<int64_t>((*operands[k])[e], 1);
      op.strides[g] = stride;
    }
  }
  return true;
}

EwLayout CollapseLayout(const Dims& iter_dims, const std::vector<Dims>& input_dims,
                        const std::vector<Dims>& output_dims) {
  const EwCollapse c = CollapseOf(iter_dims, input_dims, output_dims);
  EwLayout layout;
  std::string why;
  KILN_CHECK(ApplyCollapse(c, iter_dims, input_dims, output_dims, &layout, &why), why);
  return layout;
}

}  // namespace kiln
