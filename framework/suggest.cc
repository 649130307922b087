#include "framework/suggest.h"

#include <algorithm>

namespace kiln {

size_t EditDistance(std::string_view a, std::string_view b) {
  // Optimal string alignment: three rows of the dynamic programme.
  std::vector<size_t> prev2(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> ClosestNames(std::string_view name, const std::vector<std::string>& valid, size_t max) {
  const size_t limit = std::min(name.size() <= 4 ? size_t{1} : name.size() <= 8 ? size_t{2} : size_t{3},
                                name.size() > 0 ? name.size() - 1 : 0);
  std::vector<std::pair<size_t, size_t>> scored;  // (distance, index in valid)
  for (size_t i = 0; i < valid.size(); ++i) {
    const size_t d = EditDistance(name, valid[i]);
    if (d <= limit && valid[i] != name) scored.push_back({d, i});
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (const auto& [d, i] : scored) {
    if (out.size() == max) break;
    if (std::find(out.begin(), out.end(), valid[i]) == out.end()) out.push_back(valid[i]);
  }
  return out;
}

std::string DidYouMean(std::string_view name, const std::vector<std::string>& valid, std::string_view prefix,
                       std::string_view suffix) {
  const std::vector<std::string> close = ClosestNames(name, valid);
  if (close.empty()) return "";
  std::string out = "; did you mean ";
  for (size_t i = 0; i < close.size(); ++i) {
    if (i > 0) out += i + 1 == close.size() ? " or " : ", ";
    out += std::string(prefix) + close[i] + std::string(suffix);
  }
  return out + "?";
}

std::string QuotedNames(const std::vector<std::string>& names, size_t max) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < max; ++i) out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > max) out += " and " + std::to_string(names.size() - max) + " more";
  return out;
}

}  // namespace kiln
