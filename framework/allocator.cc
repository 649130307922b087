#include "framework/allocator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace kiln {
namespace {

constexpr size_t kSmallLimit = 512;  // classes are multiples of 64 up to here

void* SystemAlloc(size_t class_bytes) { return std::aligned_alloc(CachingAllocator::kAlignment, class_bytes); }

}  // namespace

std::string FormatBytes(size_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  return buf;
}

std::string AllocatorStats::ToString() const {
  return "in use " + FormatBytes(in_use_bytes) + " (peak " + FormatBytes(peak_in_use_bytes) + "), held " +
         FormatBytes(held_bytes) + " (peak " + FormatBytes(peak_held_bytes) + ", cached " + FormatBytes(cached_bytes) +
         "), from the system " + FormatBytes(system_bytes) + "; " + std::to_string(allocations) + " allocations, " +
         std::to_string(hits) + " hits, " + std::to_string(misses) + " misses";
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseLocked();
}

CachingAllocator& CachingAllocator::Global() {
  // Leaked on purpose: thread-local buffers may free into it after static
  // destructors ran.
  static CachingAllocator* global = new CachingAllocator(true);
  return *global;
}

size_t CachingAllocator::SizeClass(size_t bytes) {
  const size_t r = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  if (r <= kSmallLimit) return r;
  // 2^k < r <= 2^(k+1): the smallest of 2^k * {1.25, 1.5, 1.75, 2} that fits.
  // 2^k >= 512, so every class is a multiple of 128.
  size_t p = kSmallLimit;
  while (p * 2 < r) p *= 2;
  const size_t step = p / 4;
  return p + (r - p + step - 1) / step * step;
}

void* CachingAllocator::Allocate(size_t bytes) {
  const size_t cls = SizeClass(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.allocations;
    auto it = free_lists_.find(cls);
    if (caching_ && it != free_lists_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      ++stats_.hits;
      stats_.hit_bytes += bytes;
      stats_.cached_bytes -= cls;
      stats_.in_use_bytes += bytes;
      stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
      stats_.window_peak_in_use_bytes = std::max(stats_.window_peak_in_use_bytes, stats_.in_use_bytes);
      ++stats_.live_blocks;
      return p;
    }
  }
  void* p = SystemAlloc(cls);
  if (p == nullptr) {
    ReleaseCached();
    p = SystemAlloc(cls);
    if (p == nullptr) throw std::bad_alloc();
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.misses;
  stats_.system_bytes += cls;
  stats_.held_bytes += cls;
  stats_.peak_held_bytes = std::max(stats_.peak_held_bytes, stats_.held_bytes);
  stats_.in_use_bytes += bytes;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  stats_.window_peak_in_use_bytes = std::max(stats_.window_peak_in_use_bytes, stats_.in_use_bytes);
  ++stats_.live_blocks;
  return p;
}

void CachingAllocator::Free(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  const size_t cls = SizeClass(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.in_use_bytes -= bytes;
  --stats_.live_blocks;
  if (caching_) {
    free_lists_[cls].push_back(ptr);
    stats_.cached_bytes += cls;
    return;
  }
  stats_.held_bytes -= cls;
  std::free(ptr);
}

void CachingAllocator::SetCaching(bool caching) {
  std::lock_guard<std::mutex> lock(mu_);
  caching_ = caching;
  if (!caching) ReleaseLocked();
}

bool CachingAllocator::caching() const {
  std::lock_guard<std::mutex> lock(mu_);
  return caching_;
}

void CachingAllocator::ReleaseCached() {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseLocked();
}

void CachingAllocator::ReleaseLocked() {
  for (auto& [cls, blocks] : free_lists_) {
    for (void* p : blocks) std::free(p);
    stats_.cached_bytes -= cls * blocks.size();
    stats_.held_bytes -= cls * blocks.size();
    blocks.clear();
  }
  free_lists_.clear();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::ResetWindowPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.window_peak_in_use_bytes = stats_.in_use_bytes;
}

void CachingAllocator::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_in_use_bytes = stats_.in_use_bytes;
  stats_.peak_held_bytes = stats_.held_bytes;
}

void CachingAllocator::ResetStats() {
  std::lock_guard<std::mutex> lock(mu_);
  AllocatorStats s;
  s.in_use_bytes = s.peak_in_use_bytes = s.window_peak_in_use_bytes = stats_.in_use_bytes;
  s.held_bytes = s.peak_held_bytes = stats_.held_bytes;
  s.cached_bytes = stats_.cached_bytes;
  s.live_blocks = stats_.live_blocks;
  stats_ = s;
}

}  // namespace kiln
