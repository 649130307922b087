// framework/hash.h: combining depends on order and on every part; strings by
// length and bytes; floats by bits.
#include "framework/hash.h"

#include <gtest/gtest.h>

#include <string_view>
#include <unordered_set>
#include <vector>

namespace kiln {
namespace {

size_t HashOfDimsList(const std::vector<std::vector<int64_t>>& parts) {
  size_t seed = 0;
  for (const auto& p : parts) HashCombineDims(seed, p);
  return seed;
}

TEST(HashTest, DimsDependOnOrderAndGrouping) {
  EXPECT_EQ(HashOfDimsList({{2, 3}, {4}}), HashOfDimsList({{2, 3}, {4}}));
  EXPECT_NE(HashOfDimsList({{2, 3}, {4}}), HashOfDimsList({{2}, {3, 4}}));
  EXPECT_NE(HashOfDimsList({{4, 4}}), HashOfDimsList({{8, 8}}));  // what XOR of element hashes confuses
  EXPECT_NE(HashOfDimsList({{1, 2}}), HashOfDimsList({{2, 1}}));
  EXPECT_NE(HashOfDimsList({{}}), HashOfDimsList({}));
}

TEST(HashTest, SmallIntegersSpreadOverTheWord) {
  std::unordered_set<size_t> seen, low_bytes;
  for (uint64_t v = 0; v < 4096; ++v) {
    size_t seed = 0;
    HashCombine(seed, v);
    seen.insert(seed);
    low_bytes.insert(seed & 0xff);
  }
  EXPECT_EQ(seen.size(), 4096u);
  EXPECT_EQ(low_bytes.size(), 256u);  // buckets use the low bits
}

TEST(HashTest, StringsByLengthAndBytes) {
  auto hash = [](std::string_view s) {
    size_t seed = 0;
    HashCombineString(seed, s);
    return seed;
  };
  EXPECT_EQ(hash("matmul_0"), hash(std::string("matmul_0")));
  EXPECT_NE(hash("matmul_0"), hash("matmul_1"));
  EXPECT_NE(hash("matmul_0"), hash(std::string_view("matmul_0\0", 9)));  // the zero-padded tail
  EXPECT_NE(hash("a long key over several words: 1"), hash("a long key over several words: 2"));
  EXPECT_NE(hash(""), 0u);
}

TEST(HashTest, FloatsByBits) {
  EXPECT_EQ(FloatBits(1.0f), 0x3f800000u);
  size_t z = 0, nz = 0;
  HashCombineFloat(z, 0.0f);
  HashCombineFloat(nz, -0.0f);
  EXPECT_NE(z, nz);
}

}  // namespace
}  // namespace kiln
