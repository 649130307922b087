// "Did you mean": the valid names closest to a misspelt one, for error
// messages (unknown commands, flags, models, op types, fetch names ...).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// Levenshtein distance (insertions, deletions and substitutions of bytes),
// with a swap of two neighbouring bytes counted as one edit.
size_t EditDistance(std::string_view a, std::string_view b);

// The names of `valid` within a small distance of `name` (at most 1 for
// names up to 4 bytes, 2 up to 8, else 3; and less than `name`'s length),
// closest first, ties in `valid`'s order; at most `max` of them.
std::vector<std::string> ClosestNames(std::string_view name, const std::vector<std::string>& valid, size_t max = 3);

// "; did you mean --model?" or "; did you mean 'relu' or 'gelu'?" (each
// candidate written as prefix + name + suffix), "" when nothing is close.
std::string DidYouMean(std::string_view name, const std::vector<std::string>& valid, std::string_view prefix = "'",
                       std::string_view suffix = "'");

// "'a', 'b', 'c' and 2 more": the first `max` names quoted, for messages
// that list what they refer to.
std::string QuotedNames(const std::vector<std::string>& names, size_t max = 3);

}  // namespace kiln
