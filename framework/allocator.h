// CachingAllocator: where every owned tensor buffer (Allocation) comes from.
//
// A freed block goes onto the free list of its size class instead of back to
// the system, and the next request of that class takes it (a hit). Across
// training steps the executor frees and re-creates the same intermediates, so
// after the first step nearly every request is a hit. Size classes: requests
// round up to 64 bytes; up to 512 bytes every multiple of 64 is a class,
// above that four classes per power of two (2^k * {1.25, 1.5, 1.75, 2}), so a
// block is at most 25% larger than the request.
//
// Statistics separate what tensors use (requested bytes of live blocks, and
// its peak: "peak tensor bytes") from what the allocator holds from the system
// (live plus cached blocks, in class bytes). With caching off every request
// is a miss and every free returns the block to the system; the statistics
// are kept the same way, so both configurations compare in one report.
//
// Thread-safe (one mutex). The process has one allocator, Global(), which is
// never destroyed (thread-local arenas free into it at thread exit); tests
// own their own instances.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kiln {

struct AllocatorStats {
  size_t in_use_bytes = 0;       // requested bytes of live blocks
  size_t peak_in_use_bytes = 0;  // high-water mark of in_use_bytes (since ResetPeak)
  size_t held_bytes = 0;         // class bytes held from the system: live + cached
  size_t peak_held_bytes = 0;    // high-water mark of held_bytes (since ResetPeak)
  // high-water mark of in_use_bytes since ResetWindowPeak: a second peak for
  // measuring one phase (evaluation) without disturbing the first.
  size_t window_peak_in_use_bytes = 0;
  size_t cached_bytes = 0;       // class bytes on the free lists
  size_t system_bytes = 0;       // class bytes obtained from the system, cumulative
  int64_t allocations = 0;       // Allocate calls
  int64_t hits = 0;              // served from a free list
  int64_t misses = 0;            // served by the system
  size_t hit_bytes = 0;          // requested bytes served from free lists, cumulative
  int64_t live_blocks = 0;

  // "in use 1.2 MiB (peak 3.4 MiB), held 4 MiB (peak 4 MiB), ..." for logs.
  std::string ToString() const;
};

// "12.3 KiB", "4.0 MiB"; bytes below 1 KiB as "512 B".
std::string FormatBytes(size_t bytes);

class CachingAllocator {
 public:
  static constexpr size_t kAlignment = 64;

  explicit CachingAllocator(bool caching = true) : caching_(caching) {}
  ~CachingAllocator();  // returns every cached block to the system
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // The process-wide allocator behind Allocation.
  static CachingAllocator& Global();

  // The block size a request of `bytes` gets (0 counts as 1).
  static size_t SizeClass(size_t bytes);

  // A 64-byte-aligned block of at least `bytes` (SizeClass(bytes) usable).
  // Throws std::bad_alloc when the system has no memory, after returning the
  // cached blocks to it and retrying once.
  void* Allocate(size_t bytes);
  // `bytes` must be the size given to the Allocate call that returned `ptr`.
  void Free(void* ptr, size_t bytes);

  // Off: cached blocks go back to the system now, later frees go straight
  // back, every request is a miss.
  void SetCaching(bool caching);
  bool caching() const;
  // Returns every cached block to the system.
  void ReleaseCached();

  AllocatorStats stats() const;
  // Peaks restart from the current values (cumulative counters stay).
  void ResetPeak();
  // Only window_peak_in_use_bytes restarts from in_use_bytes.
  void ResetWindowPeak();
  // Every counter to zero except what is live or cached now.
  void ResetStats();

 private:
  void ReleaseLocked();

  mutable std::mutex mu_;
  bool caching_;
  std::map<size_t, std::vector<void*>> free_lists_;  // by size class
  AllocatorStats stats_;
};

}  // namespace kiln
