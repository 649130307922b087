// LruCache: eviction order, what touches an entry and what does not,
// replacement, shrinking, capacity 0, struct keys with their own hash, the
// evict callback, and values that are not copyable.
#include "framework/lru_cache.h"

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/hash.h"

namespace kiln {
namespace {

using Cache = LruCache<int, std::string>;

TEST(LruCacheTest, EvictsLeastRecentlyInsertedWhenNothingIsTouched) {
  Cache c(3);
  EXPECT_EQ(c.Insert(1, "a"), 0u);
  EXPECT_EQ(c.Insert(2, "b"), 0u);
  EXPECT_EQ(c.Insert(3, "c"), 0u);
  EXPECT_EQ(c.Insert(4, "d"), 1u);
  EXPECT_EQ(c.Keys(), (std::vector<int>{4, 3, 2}));
  EXPECT_FALSE(c.Contains(1));
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(c.capacity(), 3u);
}

TEST(LruCacheTest, FindTouchesPeekDoesNot) {
  Cache c(3);
  c.Insert(1, "a");
  c.Insert(2, "b");
  c.Insert(3, "c");
  ASSERT_NE(c.Peek(1), nullptr);
  EXPECT_EQ(*c.Peek(1), "a");
  EXPECT_TRUE(c.Contains(1));
  EXPECT_EQ(c.Keys(), (std::vector<int>{3, 2, 1}));  // Peek and Contains kept the order
  std::string* found = c.Find(1);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(*found, "a");
  EXPECT_EQ(c.Keys(), (std::vector<int>{1, 3, 2}));
  c.Insert(4, "d");  // 2 is now the least recently used
  EXPECT_EQ(c.Keys(), (std::vector<int>{4, 1, 3}));
  EXPECT_EQ(c.Find(2), nullptr);
  EXPECT_EQ(c.Peek(2), nullptr);
}

TEST(LruCacheTest, FindGivesAWritableValue) {
  Cache c(2);
  c.Insert(1, "a");
  *c.Find(1) += "x";
  EXPECT_EQ(*c.Peek(1), "ax");
}

TEST(LruCacheTest, InsertOfAPresentKeyReplacesAndTouches) {
  Cache c(3);
  c.Insert(1, "a");
  c.Insert(2, "b");
  c.Insert(3, "c");
  EXPECT_EQ(c.Insert(1, "A"), 0u);
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(*c.Peek(1), "A");
  EXPECT_EQ(c.Keys(), (std::vector<int>{1, 3, 2}));
}

TEST(LruCacheTest, ShrinkingEvictsAtOnceAndEraseAndClearWork) {
  Cache c(4);
  for (int i = 1; i <= 4; ++i) c.Insert(i, std::to_string(i));
  EXPECT_EQ(c.set_capacity(2), 2u);
  EXPECT_EQ(c.Keys(), (std::vector<int>{4, 3}));
  EXPECT_EQ(c.set_capacity(5), 0u);
  EXPECT_TRUE(c.Erase(4));
  EXPECT_FALSE(c.Erase(4));
  EXPECT_EQ(c.Keys(), (std::vector<int>{3}));
  c.Insert(7, "7");
  c.Clear();
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(c.Find(3), nullptr);
  c.Insert(3, "again");  // the index is consistent after Clear
  EXPECT_EQ(*c.Find(3), "again");
}

TEST(LruCacheTest, CapacityZeroIsOne) {
  Cache c(0);
  EXPECT_EQ(c.capacity(), 1u);
  c.Insert(1, "a");
  EXPECT_EQ(c.Insert(2, "b"), 1u);
  EXPECT_EQ(c.Keys(), (std::vector<int>{2}));
  c.set_capacity(0);
  EXPECT_EQ(c.capacity(), 1u);
  EXPECT_EQ(c.size(), 1u);
}

TEST(LruCacheTest, IteratesFromMostToLeastRecentlyUsed) {
  Cache c(3);
  c.Insert(1, "a");
  c.Insert(2, "b");
  c.Find(1);
  std::vector<std::pair<int, std::string>> seen;
  for (const auto& [key, value] : c) seen.emplace_back(key, value);
  EXPECT_EQ(seen, (std::vector<std::pair<int, std::string>>{{1, "a"}, {2, "b"}}));
}

// A struct key hashed through its own Hash(), as the typed cache keys are.
struct ShapeKey {
  std::string op;
  std::vector<int64_t> dims;
  float scale = 1.0f;
  bool operator==(const ShapeKey& o) const {
    return op == o.op && dims == o.dims && FloatBits(scale) == FloatBits(o.scale);
  }
  size_t Hash() const {
    size_t seed = 0;
    HashCombineString(seed, op);
    HashCombineDims(seed, dims);
    HashCombineFloat(seed, scale);
    return seed;
  }
};
struct ShapeKeyHash {
  size_t operator()(const ShapeKey& k) const { return k.Hash(); }
};

TEST(LruCacheTest, StructKeyWithCustomHash) {
  LruCache<ShapeKey, int, ShapeKeyHash> c(2);
  c.Insert({"matmul", {4, 8}}, 1);
  c.Insert({"matmul", {4, 8}, 0.5f}, 2);
  ASSERT_NE(c.Find({"matmul", {4, 8}}), nullptr);
  EXPECT_EQ(*c.Find({"matmul", {4, 8}}), 1);
  EXPECT_EQ(*c.Find({"matmul", {4, 8}, 0.5f}), 2);
  EXPECT_EQ(c.Find({"matmul", {8, 4}}), nullptr);
  c.Insert({"conv", {1}}, 3);  // evicts {4,8} scale 1, touched before the scale 0.5 one
  EXPECT_FALSE(c.Contains({"matmul", {4, 8}}));
  EXPECT_TRUE(c.Contains({"matmul", {4, 8}, 0.5f}));
}

TEST(LruCacheTest, EvictCallbackSeesEachEvictedEntryOldestFirst) {
  Cache c(3);
  for (int i = 1; i <= 3; ++i) c.Insert(i, std::to_string(i));
  std::vector<std::pair<int, std::string>> evicted;
  auto record = [&](const int& key, std::string& value) { evicted.emplace_back(key, value); };
  c.Insert(4, "4", record);
  EXPECT_EQ(evicted, (std::vector<std::pair<int, std::string>>{{1, "1"}}));
  evicted.clear();
  EXPECT_EQ(c.set_capacity(1, record), 2u);
  EXPECT_EQ(evicted, (std::vector<std::pair<int, std::string>>{{2, "2"}, {3, "3"}}));
  EXPECT_EQ(c.Keys(), (std::vector<int>{4}));
}

// Values the compiler cache will hold: move-only ones and shared futures of
// entries still being built.
TEST(LruCacheTest, MoveOnlyAndFutureValues) {
  LruCache<int, std::unique_ptr<int>> owned(2);
  owned.Insert(1, std::make_unique<int>(10));
  owned.Insert(1, std::make_unique<int>(11));
  EXPECT_EQ(**owned.Find(1), 11);

  LruCache<std::string, std::shared_future<int>> futures(2);
  std::promise<int> promise;
  futures.Insert("c0", promise.get_future().share());
  const std::shared_future<int>* f = futures.Peek("c0");
  ASSERT_NE(f, nullptr);
  promise.set_value(42);
  EXPECT_EQ(f->get(), 42);

  LruCache<std::string, std::shared_future<int>> moved = std::move(futures);
  ASSERT_NE(moved.Find("c0"), nullptr);  // the index survives the move
  EXPECT_EQ(moved.Find("c0")->get(), 42);
}

}  // namespace
}  // namespace kiln
