// CachingAllocator: size classes, reuse through free lists, statistics,
// caching off, threads, and Allocation/Tensor going through the global one.
#include "framework/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "framework/tensor.h"

namespace kiln {
namespace {

TEST(SizeClass, RoundsUpAtMostAQuarterAndStaysAligned) {
  EXPECT_EQ(CachingAllocator::SizeClass(0), 64u);
  EXPECT_EQ(CachingAllocator::SizeClass(1), 64u);
  EXPECT_EQ(CachingAllocator::SizeClass(64), 64u);
  EXPECT_EQ(CachingAllocator::SizeClass(65), 128u);
  EXPECT_EQ(CachingAllocator::SizeClass(512), 512u);
  EXPECT_EQ(CachingAllocator::SizeClass(513), 640u);
  EXPECT_EQ(CachingAllocator::SizeClass(1024), 1024u);
  EXPECT_EQ(CachingAllocator::SizeClass(1025), 1280u);
  EXPECT_EQ(CachingAllocator::SizeClass(65536), 65536u);
  EXPECT_EQ(CachingAllocator::SizeClass(65537), 81920u);
  size_t prev = 0;
  for (size_t b = 1; b < (1u << 22); b = b * 9 / 8 + 1) {
    const size_t c = CachingAllocator::SizeClass(b);
    EXPECT_GE(c, b);
    EXPECT_EQ(c % 64, 0u) << b;
    EXPECT_LE(c, std::max<size_t>(b + 63, b + b / 4 + 128)) << b;
    EXPECT_GE(c, prev) << b;  // monotonic
    EXPECT_EQ(CachingAllocator::SizeClass(c), c) << b;  // a class is its own class
    prev = c;
  }
}

TEST(CachingAllocator, FreedBlockIsReusedBySameClass) {
  CachingAllocator a;
  void* p = a.Allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  std::memset(p, 1, CachingAllocator::SizeClass(1000));
  a.Free(p, 1000);
  void* q = a.Allocate(1020);  // same class (1024)
  EXPECT_EQ(q, p);
  void* r = a.Allocate(2000);  // another class
  EXPECT_NE(r, p);
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.allocations, 3);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.hit_bytes, 1020u);
  EXPECT_EQ(s.in_use_bytes, 1020u + 2000u);
  EXPECT_EQ(s.peak_in_use_bytes, 1020u + 2000u);
  EXPECT_EQ(s.system_bytes, 1024u + 2048u);
  EXPECT_EQ(s.held_bytes, 1024u + 2048u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.live_blocks, 2);
  a.Free(q, 1020);
  a.Free(r, 2000);
  EXPECT_EQ(a.stats().in_use_bytes, 0u);
  EXPECT_EQ(a.stats().cached_bytes, 1024u + 2048u);
  EXPECT_EQ(a.stats().held_bytes, 1024u + 2048u);
  a.ReleaseCached();
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  EXPECT_EQ(a.stats().held_bytes, 0u);
  EXPECT_EQ(a.stats().system_bytes, 1024u + 2048u);  // cumulative
}

TEST(CachingAllocator, PeakTracksLiveBytesAndResets) {
  CachingAllocator a;
  void* p = a.Allocate(4096);
  void* q = a.Allocate(8192);
  a.Free(p, 4096);
  void* r = a.Allocate(100);
  EXPECT_EQ(a.stats().peak_in_use_bytes, 4096u + 8192u);
  EXPECT_EQ(a.stats().in_use_bytes, 8192u + 100u);
  a.ResetPeak();
  EXPECT_EQ(a.stats().peak_in_use_bytes, 8192u + 100u);
  a.Free(q, 8192);
  a.Free(r, 100);
  a.ResetStats();
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.peak_in_use_bytes, 0u);
  EXPECT_EQ(s.allocations, 0);
  EXPECT_EQ(s.system_bytes, 0u);
  EXPECT_EQ(s.cached_bytes, 4096u + 8192u + 128u);  // what is cached stays cached
  void* t = a.Allocate(8000);                        // a hit after the reset
  EXPECT_EQ(a.stats().hits, 1);
  EXPECT_EQ(a.stats().system_bytes, 0u);
  a.Free(t, 8000);
}

TEST(CachingAllocator, CachingOffGoesToTheSystemEveryTime) {
  CachingAllocator a(/*caching=*/false);
  for (int i = 0; i < 10; ++i) a.Free(a.Allocate(3000), 3000);
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.hits, 0);
  EXPECT_EQ(s.misses, 10);
  EXPECT_EQ(s.system_bytes, 10u * CachingAllocator::SizeClass(3000));
  EXPECT_EQ(s.held_bytes, 0u);
  EXPECT_EQ(s.cached_bytes, 0u);

  CachingAllocator b;
  b.Free(b.Allocate(3000), 3000);
  EXPECT_GT(b.stats().cached_bytes, 0u);
  b.SetCaching(false);  // returns what it caches
  EXPECT_FALSE(b.caching());
  EXPECT_EQ(b.stats().cached_bytes, 0u);
  EXPECT_EQ(b.stats().held_bytes, 0u);
  b.Free(b.Allocate(3000), 3000);
  EXPECT_EQ(b.stats().hits, 0);
}

TEST(CachingAllocator, ThreadsShareItSafely) {
  CachingAllocator a;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&a, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<std::pair<void*, size_t>> live;
      for (int i = 0; i < 2000; ++i) {
        if (!live.empty() && rng() % 2 == 0) {
          const size_t k = rng() % live.size();
          // The block is still ours: its first and last bytes hold our tag.
          const auto [p, n] = live[k];
          EXPECT_EQ(static_cast<unsigned char*>(p)[0], t + 1);
          EXPECT_EQ(static_cast<unsigned char*>(p)[n - 1], t + 1);
          a.Free(p, n);
          live.erase(live.begin() + static_cast<long>(k));
        } else {
          const size_t n = 1 + rng() % 20000;
          void* p = a.Allocate(n);
          static_cast<unsigned char*>(p)[0] = static_cast<unsigned char>(t + 1);
          static_cast<unsigned char*>(p)[n - 1] = static_cast<unsigned char>(t + 1);
          live.emplace_back(p, n);
        }
      }
      for (const auto& [p, n] : live) a.Free(p, n);
    });
  }
  for (auto& th : threads) th.join();
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.live_blocks, 0);
  EXPECT_EQ(s.hits + s.misses, s.allocations);
  EXPECT_GT(s.hits, 0);
  EXPECT_EQ(s.held_bytes, s.cached_bytes);
}

TEST(CachingAllocator, TensorsAllocateThroughTheGlobalOne) {
  CachingAllocator& g = CachingAllocator::Global();
  const bool was = g.caching();
  g.SetCaching(true);
  const size_t before = g.stats().in_use_bytes;
  void* first = nullptr;
  {
    Tensor t(DataType::kFP32, {1000, 3});
    first = t.mutable_data<float>();
    EXPECT_EQ(g.stats().in_use_bytes, before + 12000u);
  }
  EXPECT_EQ(g.stats().in_use_bytes, before);
  const int64_t hits = g.stats().hits;
  Tensor u(DataType::kFP32, {3000});
  EXPECT_EQ(u.mutable_data<float>(), first);  // the same class comes back
  EXPECT_EQ(g.stats().hits, hits + 1);
  // A non-owning view allocates nothing.
  std::vector<float> ext(10);
  Tensor v;
  v.ShareExternalData(ext.data(), DataType::kFP32, {10});
  EXPECT_EQ(g.stats().in_use_bytes, before + 12000u);
  g.SetCaching(was);
}

TEST(FormatBytes, Readable) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(3u << 20), "3.0 MiB");
}

}  // namespace
}  // namespace kiln
