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

// The planner's state for one plan: live ranges by root buffer, what is
// placed in the arena and in each dying input.
class Planner {
 public:
  Planner(const std::vector<Instruction>& instructions, BufferPlan* plan)
      : instructions_(instructions), plan_(*plan), n_(static_cast<int>(plan->buffers.size())) {
    first_.assign(n_, std::numeric_limits<int>::max());
    last_.assign(n_, -1);
    for (int i = 0; i < static_cast<int>(instructions.size()); ++i) {
      for (int b : instructions[i].args) {
        const int r = RootBuffer(plan_, b);
        first_[r] = std::min(first_[r], i);
        last_[r] = std::max(last_[r], i);
      }
    }
    for (int b = 0; b < n_; ++b) {
      const BufferInfo& info = plan_.buffers[b];
      if (info.role == BufferRole::kInput && info.donatable && last_[b] >= 0) donor_ids_.push_back(b);
    }
    in_donor_.resize(n_);
    FindFreshOutputs();
  }

  // With reuse, the largest temps first (ties: the earliest written first): a
  // first fit in that order leaves fewer holes than in buffer order (a large
  // temp placed late finds no gap between smaller ones and grows the arena).
  // A temp written in place over a dying temp waits for that temp's place.
  void PlaceAll(bool reuse) {
    std::vector<int> order;
    for (int b = 0; b < n_; ++b) {
      const BufferInfo& info = plan_.buffers[b];
      if (info.role != BufferRole::kTemp || info.view_of >= 0 || info.dims_only || last_[b] < 0) continue;
      order.push_back(b);
    }
    if (reuse) {
      std::stable_sort(order.begin(), order.end(), [this](int a, int b) {
        const size_t sa = AlignUp(plan_.buffers[a].bytes()), sb = AlignUp(plan_.buffers[b].bytes());
        return sa != sb ? sa > sb : first_[a] < first_[b];
      });
    }
    placed_flag_.assign(n_, false);
    for (int b : order) {
      BufferInfo& info = plan_.buffers[b];
      placed_flag_[b] = true;
      const size_t size = AlignUp(std::max<size_t>(info.bytes(), 1));
      plan_.arena_bytes_no_reuse += size;
      info.region = -1;
      if (!reuse) {
        info.offset = plan_.arena_bytes;
        plan_.arena_bytes += size;
        continue;
      }
      if (PlaceInPlace(b, size) || PlaceInDonor(b, size)) continue;
      const auto fits = FirstFit(placed_, first_[b], last_[b], size, plan_.arena_bytes);
      if (!fits && PlaceInOutput(b, size)) continue;
      info.offset = fits ? *fits : *FirstFit(placed_, first_[b], last_[b], size, std::numeric_limits<size_t>::max());
      placed_.push_back({info.offset, size, first_[b], last_[b], b});
      plan_.arena_bytes = std::max(plan_.arena_bytes, info.offset + size);
    }
    std::sort(plan_.donors.begin(), plan_.donors.end());
    std::sort(plan_.output_regions.begin(), plan_.output_regions.end());
  }

  // Each instruction's scratch (Kernel::ScratchBytes), live at that
  // instruction alone: after the temps, the lowest arena offset free there
  // (with reuse: a step's largest oneDNN reorder buffers go where the
  // forward's dead activations were); without reuse, one slot at the end
  // that every instruction shares.
  void PlaceScratch(bool reuse) {
    plan_.scratch_offset.assign(instructions_.size(), BufferPlan::kNoScratch);
    plan_.scratch_bytes = 0;
    plan_.temp_arena_bytes = plan_.arena_bytes;
    const size_t shared = plan_.arena_bytes;
    for (int i = 0; i < static_cast<int>(instructions_.size()); ++i) {
      const Kernel* k = instructions_[i].kernel.get();
      const size_t bytes = k != nullptr ? k->ScratchBytes() : 0;
      if (bytes == 0) continue;
      const size_t size = AlignUp(bytes);
      plan_.scratch_bytes = std::max(plan_.scratch_bytes, size);
      const size_t offset = reuse ? *FirstFit(placed_, i, i, size, std::numeric_limits<size_t>::max()) : shared;
      plan_.scratch_offset[i] = offset;
      plan_.arena_bytes = std::max(plan_.arena_bytes, offset + size);
    }
  }

  // Views take their root's place (a temp root's region and offset).
  void PlaceViews() {
    for (int b = 0; b < n_; ++b) {
      BufferInfo& info = plan_.buffers[b];
      if (info.view_of < 0 || info.role != BufferRole::kTemp) continue;
      const BufferInfo& root = plan_.buffers[RootBuffer(plan_, b)];
      info.region = root.role == BufferRole::kTemp ? root.region : -1;
      info.offset = root.role == BufferRole::kTemp ? root.offset : 0;
    }
  }

  // When outputs are made (before their first write, or before the first
  // temp placed in them) and when each dying input's memory is last used
  // (its last read or the last use of a temp placed in it).
  void Schedule() {
    plan_.alloc_before.assign(instructions_.size(), {});
    for (int b = 0; b < n_; ++b) {
      const BufferInfo& info = plan_.buffers[b];
      if (info.role != BufferRole::kOutput || last_[b] < 0) continue;
      int start = first_[b];
      for (const Placed& p : in_donor_[b]) start = std::min(start, p.first);
      plan_.alloc_before[start].push_back(info.io_index);
    }
    plan_.free_after.assign(instructions_.size(), {});
    for (int d : donor_ids_) {
      int end = last_[d];
      for (const Placed& p : in_donor_[d]) end = std::max(end, p.last);
      plan_.free_after[end].push_back(plan_.buffers[d].io_index);
    }
  }

 private:
  // A temp of `size` bytes placed in a dying input's or an output's memory.
  void NoteRegion(int region, size_t size) {
    const bool output = plan_.buffers[region].role == BufferRole::kOutput;
    (output ? plan_.output_region_bytes : plan_.donated_bytes) += size;
    std::vector<int>& regions = output ? plan_.output_regions : plan_.donors;
    if (std::find(regions.begin(), regions.end(), region) == regions.end()) regions.push_back(region);
  }

  // Temp b at `offset` in output o's memory ends before o's first write, or
  // at it when that write goes over b (WrittenOver, at the same offset 0).
  bool BeforeWrite(int b, int o, size_t offset) const {
    return last_[b] < first_[o] || (last_[b] == first_[o] && offset == 0 && WrittenOver(first_[o], b, o));
  }

  // In place over an input of its first writer that dies there.
  bool PlaceInPlace(int b, size_t size) {
    BufferInfo& info = plan_.buffers[b];
    const Instruction& ins = instructions_[first_[b]];
    for (const auto& [ka, kb] : ins.inplace) {
      const int d = RootBuffer(plan_, ins.args[ka]);
      if (ins.args[kb] != b || d == b || last_[d] != first_[b]) continue;
      const BufferInfo& dinfo = plan_.buffers[d];
      if (dinfo.dims_only || dinfo.bytes() < info.bytes() || dinfo.dtype != info.dtype) continue;
      int region = -1;
      size_t offset = 0;
      if (dinfo.role == BufferRole::kTemp) {
        if (!placed_flag_[d]) continue;
        region = dinfo.region;
        offset = dinfo.offset;
      } else if (std::find(donor_ids_.begin(), donor_ids_.end(), d) != donor_ids_.end()) {
        region = d;
      } else {
        continue;
      }
      // In an output's memory: done before the output is written there.
      if (region >= 0 && plan_.buffers[region].role == BufferRole::kOutput && !BeforeWrite(b, region, offset)) continue;
      std::vector<Placed>& pool = region >= 0 ? in_donor_[region] : placed_;
      bool clash = false;
      for (const Placed& p : pool) {
        const bool live = p.last >= first_[b] && p.first <= last_[b];
        if (live && p.id != d && p.offset < offset + size && offset < p.offset + p.size) clash = true;
      }
      if (clash) continue;
      info.region = region;
      info.offset = offset;
      pool.push_back({offset, size, first_[b], last_[b], b});
      if (region >= 0) NoteRegion(region, size);
      if (region < 0) plan_.arena_bytes = std::max(plan_.arena_bytes, offset + size);
      return true;
    }
    return false;
  }

  // An output not made yet: one whose first use writes it without reading
  // it (so not an in-place update) after the temp's last use, or at it when
  // that write may go over the temp (WrittenOver). The output is
  // then made before the temp's first write instead of the arena growing for
  // it: a cluster's late outputs (the backward's first gradients in a
  // whole-step cluster) hold the forward's dead temps. The smallest such
  // output it fits in.
  bool PlaceInOutput(int b, size_t size) {
    return PlaceInSmallest(b, size, fresh_outputs_, [&](int o, size_t offset) { return BeforeWrite(b, o, offset); });
  }

  // The smallest of `regions` with room for b (first fit by lifetime inside
  // it) where `allowed(region, offset)` holds; `allowed(region, 0)` first
  // says whether the region may hold b at all.
  template <typename Allowed>
  bool PlaceInSmallest(int b, size_t size, const std::vector<int>& regions, Allowed allowed) {
    BufferInfo& info = plan_.buffers[b];
    int best = -1;
    size_t best_offset = 0;
    for (int r : regions) {
      if (!allowed(r, 0)) continue;
      const size_t limit = plan_.buffers[r].bytes();
      if (best >= 0 && limit >= plan_.buffers[best].bytes()) continue;
      const auto offset = FirstFit(in_donor_[r], first_[b], last_[b], info.bytes(), limit);
      if (offset && allowed(r, *offset)) {
        best = r;
        best_offset = *offset;
      }
    }
    if (best < 0) return false;
    info.region = best;
    info.offset = best_offset;
    in_donor_[best].push_back({best_offset, size, first_[b], last_[b], b});
    NoteRegion(best, size);
    return true;
  }

  // Instruction i writes output o in place over temp b (Kernel::InplacePairs),
  // same dtype and size: b may then live in o's memory up to that write.
  bool WrittenOver(int i, int b, int o) const {
    const BufferInfo& bi = plan_.buffers[b];
    const BufferInfo& oi = plan_.buffers[o];
    if (bi.dtype != oi.dtype || bi.bytes() != oi.bytes()) return false;
    const Instruction& ins = instructions_[i];
    for (const auto& [ka, kb] : ins.inplace) {
      if (ins.args[ka] == b && ins.args[kb] == o) return true;
    }
    return false;
  }

  // Outputs whose first use writes them and reads neither them nor a view of them.
  void FindFreshOutputs() {
    for (int o = 0; o < n_; ++o) {
      const BufferInfo& info = plan_.buffers[o];
      if (info.role != BufferRole::kOutput || info.view_of >= 0 || last_[o] < 0) continue;
      const Instruction& ins = instructions_[first_[o]];
      bool read = false;
      for (int a = 0; a < ins.num_inputs; ++a) read = read || RootBuffer(plan_, ins.args[a]) == o;
      if (!read) fresh_outputs_.push_back(o);
    }
  }

  // A dead donatable input: the smallest one it fits in. Only the temp's own
  // bytes must fit; its aligned size keeps the next one aligned.
  bool PlaceInDonor(int b, size_t size) {
    return PlaceInSmallest(b, size, donor_ids_, [&](int d, size_t) { return last_[d] < first_[b]; });
  }

  const std::vector<Instruction>& instructions_;
  BufferPlan& plan_;
  const int n_;
  std::vector<int> first_, last_;          // by root buffer
  std::vector<int> donor_ids_;             // donatable inputs that some instruction reads
  std::vector<int> fresh_outputs_;         // outputs that may hold temps before their first write
  std::vector<bool> placed_flag_;          // temps placed so far, by buffer id
  std::vector<Placed> placed_;             // in the arena
  std::vector<std::vector<Placed>> in_donor_;  // by donor (or output) buffer id
};

}  // namespace

int RootBuffer(const BufferPlan& plan, int b) {
  while (plan.buffers[b].view_of >= 0) b = plan.buffers[b].view_of;
  return b;
}

void PlanArena(const std::vector<Instruction>& instructions, BufferPlan* plan, bool reuse) {
  plan->arena_bytes = 0;
  plan->arena_bytes_no_reuse = 0;
  plan->donors.clear();
  plan->donated_bytes = 0;
  plan->output_regions.clear();
  plan->output_region_bytes = 0;
  Planner planner(instructions, plan);
  planner.PlaceAll(reuse);
  planner.PlaceScratch(reuse);
  planner.PlaceViews();
  planner.Schedule();
}

ArenaPeak ArenaPeakOf(const std::vector<Instruction>& instructions, const BufferPlan& plan) {
  const int n = static_cast<int>(plan.buffers.size());
  std::vector<int> first(n, -1), last(n, -1);  // by root buffer
  for (int i = 0; i < static_cast<int>(instructions.size()); ++i) {
    for (int b : instructions[i].args) {
      const int r = RootBuffer(plan, b);
      if (first[r] < 0) first[r] = i;
      last[r] = i;
    }
  }
  ArenaPeak peak;
  for (int i = 0; i < static_cast<int>(instructions.size()); ++i) {
    std::vector<std::pair<size_t, size_t>> busy;
    std::vector<int> live;
    for (int b = 0; b < n; ++b) {
      const BufferInfo& info = plan.buffers[b];
      if (info.role != BufferRole::kTemp || info.view_of >= 0 || info.dims_only || info.region >= 0) continue;
      if (first[b] < 0 || first[b] > i || last[b] < i) continue;
      busy.emplace_back(info.offset, info.offset + AlignUp(std::max<size_t>(info.bytes(), 1)));
      live.push_back(b);
    }
    if (static_cast<size_t>(i) < plan.scratch_offset.size() && plan.scratch_offset[i] != BufferPlan::kNoScratch) {
      const size_t at = plan.scratch_offset[i];
      busy.emplace_back(at, at + AlignUp(instructions[i].kernel->ScratchBytes()));
    }
    std::sort(busy.begin(), busy.end());
    size_t used = 0, end = 0;
    for (const auto& [lo, hi] : busy) {
      if (hi > std::max(lo, end)) used += hi - std::max(lo, end);
      end = std::max(end, hi);
    }
    if (used > peak.bytes) peak = {used, i, std::move(live)};
  }
  return peak;
}

}  // namespace kiln::runtime
