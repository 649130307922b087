#include "framework/ew/ew_resize.h"

#include <sstream>
#include <utility>

namespace kiln {
namespace {

// Placements beyond this many make an operand not resizable (ranks are
// small: a few at most in practice).
constexpr size_t kMaxPlacements = 64;

// Every increasing map of var's dims into padded's positions that puts each
// var dim on an equal padded dim and leaves only 1s unmapped.
void Place(const Dims& var, const Dims& padded, size_t i, size_t from, std::vector<int>* cur,
           std::vector<std::vector<int>>* out) {
  if (out->size() > kMaxPlacements) return;
  if (i == var.size()) {
    for (size_t p = from; p < padded.size(); ++p) {
      if (padded[p] != 1) return;
    }
    out->push_back(*cur);
    return;
  }
  for (size_t p = from; p < padded.size(); ++p) {
    if (padded[p] == var[i]) {
      cur->push_back(static_cast<int>(p));
      Place(var, padded, i + 1, p + 1, cur, out);
      cur->pop_back();
    }
    if (padded[p] != 1) return;  // a non-1 padded dim must take a var dim
  }
}

}  // namespace

EwLayoutResizer::EwLayoutResizer(Dims iter, const std::vector<Dims>& padded_inputs,
                                 const std::vector<Dims>& padded_outputs, std::vector<Dims> var_dims)
    : iter_(std::move(iter)), num_inputs_(padded_inputs.size()), var_dims_(std::move(var_dims)) {
  padded_ = padded_inputs;
  padded_.insert(padded_.end(), padded_outputs.begin(), padded_outputs.end());
  KILN_CHECK(var_dims_.size() == padded_.size(), "EwLayoutResizer: ", var_dims_.size(), " var dims for ",
             padded_.size(), " operands");
  collapse_ = CollapseOf(iter_, padded_inputs, padded_outputs);
  placements_.resize(padded_.size());
  for (size_t k = 0; k < padded_.size(); ++k) {
    std::vector<int> cur;
    Place(var_dims_[k], padded_[k], 0, 0, &cur, &placements_[k]);
    if (placements_[k].size() > kMaxPlacements) placements_[k].clear();
  }
}

bool EwLayoutResizer::PaddedAt(size_t k, const Dims& var, Dims* padded, std::string* why) const {
  const std::string name = k < num_inputs_ ? "input " + std::to_string(k) : "output " + std::to_string(k - num_inputs_);
  auto fail = [&](const std::string& reason) {
    if (why != nullptr) *why = name + " " + DimsToString(var) + ": " + reason;
    return false;
  };
  if (var.size() != var_dims_[k].size()) {
    return fail("compiled for rank " + std::to_string(var_dims_[k].size()) + " (" + DimsToString(var_dims_[k]) + ")");
  }
  if (placements_[k].empty()) {
    return fail("its compile-time dims " + DimsToString(var_dims_[k]) + " have no (or too many) places in " +
                DimsToString(padded_[k]));
  }
  bool first = true;
  for (const Placement& at : placements_[k]) {
    Dims p(padded_[k].size(), 1);
    for (size_t i = 0; i < at.size(); ++i) p[at[i]] = var[i];
    if (!first && p != *padded) {
      return fail("its place in the iteration dims is ambiguous (" + DimsToString(*padded) + " or " +
                  DimsToString(p) + "; compiled as " + DimsToString(var_dims_[k]) + " in " +
                  DimsToString(padded_[k]) + ")");
    }
    *padded = std::move(p);
    first = false;
  }
  return true;
}

std::optional<EwLayout> EwLayoutResizer::LayoutAt(const std::vector<Dims>& var_dims, std::string* why) const {
  if (var_dims.size() != padded_.size()) {
    if (why != nullptr) *why = "got dims of " + std::to_string(var_dims.size()) + " args for " +
                               std::to_string(padded_.size()) + " operands";
    return std::nullopt;
  }
  std::vector<Dims> padded(padded_.size());
  for (size_t k = 0; k < padded_.size(); ++k) {
    if (!PaddedAt(k, var_dims[k], &padded[k], why)) return std::nullopt;
  }
  // Each iteration dim from the operands that had it at compile time.
  Dims iter(iter_.size(), 1);
  for (size_t d = 0; d < iter_.size(); ++d) {
    if (iter_[d] == 1) {  // no loop: ApplyCollapse checks that it stays 1
      for (size_t k = 0; k < padded.size(); ++k) iter[d] = padded[k][d] != 1 ? padded[k][d] : iter[d];
      continue;
    }
    bool found = false;
    for (size_t k = 0; k < padded_.size(); ++k) {
      if (padded_[k][d] != iter_[d]) continue;
      if (found && padded[k][d] != iter[d]) {
        if (why != nullptr) {
          std::ostringstream os;
          os << "operands disagree on iteration dim " << d << ": " << iter[d] << " and " << padded[k][d];
          *why = os.str();
        }
        return std::nullopt;
      }
      iter[d] = padded[k][d];
      found = true;
    }
    if (!found) {
      if (why != nullptr) *why = "iteration dim " + std::to_string(d) + " of " + DimsToString(iter_) +
                                 " is no operand's dim: its new size is unknown";
      return std::nullopt;
    }
  }
  const std::vector<Dims> in(padded.begin(), padded.begin() + static_cast<std::ptrdiff_t>(num_inputs_));
  const std::vector<Dims> out(padded.begin() + static_cast<std::ptrdiff_t>(num_inputs_), padded.end());
  EwLayout layout;
  if (!ApplyCollapse(collapse_, iter, in, out, &layout, why)) return std::nullopt;
  return layout;
}

}  // namespace kiln
