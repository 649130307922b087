#include <algorithm>
#include <limits>

#include "runtime/program.h"

namespace kiln::runtime {
namespace {

constexpr size_t kAlign = 64;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Placed {
  size_t offset, size;
  int first, last;
};

}  // namespace

void PlanArena(const std::vector<Instruction>& instructions, BufferPlan* plan, bool reuse) {
  const int n = static_cast<int>(plan->buffers.size());
  std::vector<int> first(n, std::numeric_limits<int>::max()), last(n, -1);
  for (int i = 0; i < static_cast<int>(instructions.size()); ++i) {
    for (int b : instructions[i].args) {
      first[b] = std::min(first[b], i);
      last[b] = std::max(last[b], i);
    }
  }
  plan->arena_bytes = 0;
  plan->arena_bytes_no_reuse = 0;
  std::vector<Placed> placed;
  for (int b = 0; b < n; ++b) {
    BufferInfo& info = plan->buffers[b];
    if (info.role != BufferRole::kTemp || last[b] < 0) continue;
    const size_t size = AlignUp(std::max<size_t>(info.bytes(), 1));
    plan->arena_bytes_no_reuse += size;
    if (!reuse) {
      info.offset = plan->arena_bytes;
      plan->arena_bytes += size;
      continue;
    }
    // Lowest offset that overlaps no buffer live at the same time.
    std::vector<std::pair<size_t, size_t>> busy;
    for (const Placed& p : placed) {
      if (p.last >= first[b] && p.first <= last[b]) busy.emplace_back(p.offset, p.offset + p.size);
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + size <= lo) break;
      offset = std::max(offset, hi);
    }
    info.offset = offset;
    placed.push_back({offset, size, first[b], last[b]});
    plan->arena_bytes = std::max(plan->arena_bytes, offset + size);
  }
}

}  // namespace kiln::runtime
