// The copy kernels (compiler/kernels/copy.h) at sizes other than the ones
// they were made for (issue 32): transposes (the generated kernel and the
// strided copy) resized to new dims with the same perm, against a plain
// transpose; views, which read their sizes at run time; and the resizes a
// transpose cannot serve.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "compiler/kernels/copy.h"

namespace kiln::jit {
namespace {

// Out[i...] = In[perm-ed index], element by element.
template <typename T>
std::vector<T> Transposed(const std::vector<T>& in, const Dims& in_dims, const std::vector<int64_t>& perm) {
  const size_t rank = in_dims.size();
  Dims od(rank);
  for (size_t i = 0; i < rank; ++i) od[i] = in_dims[perm[i]];
  std::vector<int64_t> in_strides(rank, 1);
  for (size_t d = rank; d-- > 1;) in_strides[d - 1] = in_strides[d] * in_dims[d];
  std::vector<T> out(static_cast<size_t>(Numel(od)));
  std::vector<int64_t> idx(rank, 0);
  for (size_t n = 0; n < out.size(); ++n) {
    int64_t src = 0;
    for (size_t i = 0; i < rank; ++i) src += idx[i] * in_strides[perm[i]];
    out[n] = in[static_cast<size_t>(src)];
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < od[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

template <typename T>
void CheckTranspose(const runtime::Kernel& k, const Dims& in_dims, const std::vector<int64_t>& perm,
                    DataType dtype, const std::string& what) {
  std::vector<T> in(static_cast<size_t>(Numel(in_dims)));
  std::iota(in.begin(), in.end(), T(1));
  Dims od(in_dims.size());
  for (size_t i = 0; i < od.size(); ++i) od[i] = in_dims[perm[i]];
  std::vector<T> out(in.size(), T(-1));
  const runtime::BufferView args[2] = {{in.data(), dtype, &in_dims}, {out.data(), dtype, &od}};
  k.Run(args);
  EXPECT_EQ(out, Transposed(in, in_dims, perm)) << what;
}

struct TransposeCase {
  Dims made_at;
  std::vector<int64_t> perm;
  std::vector<Dims> sizes;
};

// Perms that keep the inner dim (the generated kernel for f32) and that
// move it (the strided copy), with dims that become 1, odd and tails.
const std::vector<TransposeCase>& Cases() {
  static const std::vector<TransposeCase> cases{
      {{4, 6, 40}, {1, 0, 2}, {{1, 6, 40}, {3, 5, 7}, {2, 1, 17}, {5, 3, 1}, {1, 1, 1}, {7, 9, 33}}},
      {{3, 4, 5, 16}, {2, 0, 1, 3}, {{2, 3, 4, 3}, {1, 2, 3, 17}, {3, 1, 2, 1001}}},
      {{4, 6, 5}, {2, 1, 0}, {{3, 2, 7}, {1, 6, 5}, {5, 1, 1}, {9, 3, 33}}},
      {{8, 3, 5, 2}, {0, 2, 3, 1}, {{2, 3, 5, 2}, {1, 7, 2, 3}}},
  };
  return cases;
}

Dims Permute(const Dims& d, const std::vector<int64_t>& perm) {
  Dims out(d.size());
  for (size_t i = 0; i < d.size(); ++i) out[i] = d[perm[i]];
  return out;
}

TEST(CopyResizeTest, TransposesAtOtherSizesMatchAPlainTranspose) {
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!IsaSupported(isa)) continue;
    for (const TransposeCase& c : Cases()) {
      for (DataType dtype : {DataType::kFP32, DataType::kINT64}) {
        const auto k = MakeTransposeKernel(c.made_at, c.perm, dtype, isa, "t", "transpose2");
        for (const Dims& d : c.sizes) {
          const std::string what = std::string(IsaName(isa)) + " " + DataTypeName(dtype) + " " + k->Describe() +
                                   " at " + DimsToString(d);
          std::string why;
          const auto r = k->Resize({d, Permute(d, c.perm)}, &why);
          ASSERT_NE(r, nullptr) << what << ": " << why;
          if (k->code() != nullptr) {
            EXPECT_EQ(r->code(), k->code()) << what << ": the code is shared";
          }
          if (dtype == DataType::kFP32) {
            CheckTranspose<float>(*r, d, c.perm, dtype, what);
          } else {
            CheckTranspose<int64_t>(*r, d, c.perm, dtype, what);
          }
        }
      }
    }
  }
}

TEST(CopyResizeTest, TransposeResizesThatChangeTheLoopsFail) {
  for (DataType dtype : {DataType::kFP32, DataType::kINT64}) {
    const auto k = MakeTransposeKernel({1, 6, 40}, {1, 0, 2}, dtype, HostIsa(), "t", "transpose2");
    std::string why;
    EXPECT_EQ(k->Resize({{4, 6, 40}, {6, 4, 40}}, &why), nullptr) << DataTypeName(dtype);
    EXPECT_NE(why.find("was 1 (no loop)"), std::string::npos) << why;
    EXPECT_EQ(k->Resize({{1, 6, 40}, {6, 40, 1}}, &why), nullptr);
    EXPECT_NE(why.find("is not In"), std::string::npos) << why;
    EXPECT_EQ(k->Resize({{6, 40}, {40, 6}}, &why), nullptr);
    EXPECT_NE(why.find("rank"), std::string::npos) << why;
  }
}

TEST(CopyResizeTest, ViewsCopyTheBoundSizes) {
  const auto k = MakeViewKernel({4, 6}, DataType::kFP32, "v");
  EXPECT_TRUE(k->ReadsDimsAtRunTime());
  for (const Dims& d : {Dims{1, 3}, Dims{7, 5}, Dims{2, 33}}) {
    std::vector<float> in(static_cast<size_t>(Numel(d)));
    std::iota(in.begin(), in.end(), 1.0f);
    std::vector<float> out(in.size() + 4, -1.0f);
    const Dims flat{Numel(d)};
    const runtime::BufferView args[2] = {{in.data(), DataType::kFP32, &d}, {out.data(), DataType::kFP32, &flat}};
    k->Run(args);
    EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + static_cast<int64_t>(in.size())), in);
    EXPECT_EQ(out.back(), -1.0f) << "copied past Out";
  }
}

}  // namespace
}  // namespace kiln::jit
