#include <algorithm>
#include <limits>
#include <optional>

#include "runtime/program.h"

namespace kiln::runtime {
namespace {

constexpr size_t kAlign = 64;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Placed {
  size_t offset, size;
  int first, last;
  int id = -1;  // buffer id
};

// Lowest 64-byte-aligned offset where [offset, offset + size) overlaps none
// of `placed` live during [first, last]; nullopt when it would end past `limit`.
std::optional<size_t> FirstFit(const std::vector<Placed>& placed, int first, int last, size_t size, size_t limit) {
  std::vector<std::pair<size_t, size_t>> busy;
  for (const Placed& p : placed) {
    if (p.last >= first && p.first <= last) busy.emplace_back(p.offset, p.offset + p.size);
  }
  std::sort(busy.begin(), busy.end());
  size_t offset = 0;
  for (const auto& [lo, hi] : busy) {
    if (offset + size <= lo) break;
    offset = std::max(offset, hi);
  }
  if (offset + size > limit) return std::nullopt;
  return offset;
}

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
  plan->donors.clear();
  plan->donated_bytes = 0;
  std::vector<int> donor_ids;  // donatable inputs that some instruction reads
  for (int b = 0; b < n; ++b) {
    const BufferInfo& info = plan->buffers[b];
    if (info.role == BufferRole::kInput && info.donatable && last[b] >= 0) donor_ids.push_back(b);
  }
  std::vector<Placed> placed;                        // in the arena
  std::vector<std::vector<Placed>> in_donor(n);      // by donor buffer id
  for (int b = 0; b < n; ++b) {
    BufferInfo& info = plan->buffers[b];
    if (info.role != BufferRole::kTemp || last[b] < 0) continue;
    const size_t size = AlignUp(std::max<size_t>(info.bytes(), 1));
    plan->arena_bytes_no_reuse += size;
    info.region = -1;
    if (!reuse) {
      info.offset = plan->arena_bytes;
      plan->arena_bytes += size;
      continue;
    }
    // In place over an input of its first writer that dies there.
    bool in_place = false;
    for (const auto& [ka, kb] : instructions[first[b]].inplace) {
      const std::vector<int>& args = instructions[first[b]].args;
      const int d = args[ka];
      if (args[kb] != b || d == b || last[d] != first[b]) continue;
      const BufferInfo& dinfo = plan->buffers[d];
      if (dinfo.bytes() < info.bytes() || dinfo.dtype != info.dtype) continue;
      int region = -1;
      size_t offset = 0;
      if (dinfo.role == BufferRole::kTemp) {
        region = dinfo.region;
        offset = dinfo.offset;
      } else if (dinfo.role == BufferRole::kInput && std::find(donor_ids.begin(), donor_ids.end(), d) !=
                                                          donor_ids.end()) {
        region = d;
      } else {
        continue;
      }
      std::vector<Placed>& pool = region >= 0 ? in_donor[region] : placed;
      bool clash = false;
      for (const Placed& p : pool) {
        const bool live = p.last >= first[b] && p.first <= last[b];
        const bool is_d = p.id == d;
        if (live && !is_d && p.offset < offset + size && offset < p.offset + p.size) clash = true;
      }
      if (clash) continue;
      info.region = region;
      info.offset = offset;
      pool.push_back({offset, size, first[b], last[b], b});
      if (region >= 0) {
        plan->donated_bytes += size;
        if (std::find(plan->donors.begin(), plan->donors.end(), region) == plan->donors.end()) {
          plan->donors.push_back(region);
        }
      }
      plan->arena_bytes = region >= 0 ? plan->arena_bytes : std::max(plan->arena_bytes, offset + size);
      in_place = true;
      break;
    }
    if (in_place) continue;
    // A dead donatable input: the smallest one it fits in. Only the temp's
    // own bytes must fit; its aligned size keeps the next one aligned.
    int best = -1;
    size_t best_offset = 0;
    for (int d : donor_ids) {
      if (last[d] >= first[b]) continue;
      const size_t limit = plan->buffers[d].bytes();
      if (best >= 0 && limit >= plan->buffers[best].bytes()) continue;
      const auto offset = FirstFit(in_donor[d], first[b], last[b], info.bytes(), limit);
      if (offset) {
        best = d;
        best_offset = *offset;
      }
    }
    if (best >= 0) {
      info.region = best;
      info.offset = best_offset;
      in_donor[best].push_back({best_offset, size, first[b], last[b], b});
      plan->donated_bytes += size;
      if (std::find(plan->donors.begin(), plan->donors.end(), best) == plan->donors.end()) {
        plan->donors.push_back(best);
      }
      continue;
    }
    const size_t offset = *FirstFit(placed, first[b], last[b], size, std::numeric_limits<size_t>::max());
    info.offset = offset;
    placed.push_back({offset, size, first[b], last[b], b});
    plan->arena_bytes = std::max(plan->arena_bytes, offset + size);
  }
  std::sort(plan->donors.begin(), plan->donors.end());
  // When each donatable input's memory is last used: its last read or the
  // last use of a temp placed in it.
  plan->alloc_before.assign(instructions.size(), {});
  for (int b = 0; b < n; ++b) {
    const BufferInfo& info = plan->buffers[b];
    if (info.role == BufferRole::kOutput && last[b] >= 0) plan->alloc_before[first[b]].push_back(info.io_index);
  }
  plan->free_after.assign(instructions.size(), {});
  for (int d : donor_ids) {
    int end = last[d];
    for (const Placed& p : in_donor[d]) end = std::max(end, p.last);
    plan->free_after[end].push_back(plan->buffers[d].io_index);
  }
}

}  // namespace kiln::runtime
