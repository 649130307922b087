#include "passes/pass_flags.h"

#include "framework/flags.h"

namespace kiln {

std::vector<std::string> SplitOpList(const std::string& list) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    size_t first = list.find_first_not_of(" \t", begin);
    size_t last = list.find_last_not_of(" \t", end == 0 ? 0 : end - 1);
    if (first != std::string::npos && first < end && last != std::string::npos && last >= first) {
      out.push_back(list.substr(first, last - first + 1));
    }
    begin = end + 1;
  }
  return out;
}

BuildJitPassOptions BuildJitPassOptionsFromFlags() {
  BuildJitPassOptions o;
  o.allow_ops = SplitOpList(FLAGS_jit_allow_ops);
  o.deny_ops = SplitOpList(FLAGS_jit_deny_ops);
  o.min_cluster_size = FLAGS_jit_min_cluster_size;
  return o;
}

}  // namespace kiln
