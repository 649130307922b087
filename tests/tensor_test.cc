#include "framework/tensor.h"

#include <gtest/gtest.h>

#include "framework/scope.h"

namespace kiln {
namespace {

TEST(TensorTest, AllocatesAlignedBufferOnFirstWrite) {
  Tensor t(DataType::kFP32, {3, 7});
  EXPECT_FALSE(t.initialized());
  float* p = t.mutable_data<float>();
  EXPECT_TRUE(t.initialized());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(t.numel(), 21);
  EXPECT_EQ(t.bytes(), 84u);
  EXPECT_EQ(t.ShapeString(), "f32[3,7]");
}

TEST(TensorTest, ReusesBufferWhenLargeEnoughAndGrowsOtherwise) {
  Tensor t(DataType::kFP32, {8});
  float* a = t.mutable_data<float>();
  t.Resize({4});
  EXPECT_EQ(t.mutable_data<float>(), a);
  t.Resize({1000});
  EXPECT_NE(t.mutable_data<float>(), a);
}

TEST(TensorTest, SharedBufferIsSeenByBoth) {
  Tensor a(DataType::kFP32, {4});
  a.mutable_data<float>()[2] = 5.f;
  Tensor b;
  b.Resize({4});
  EXPECT_FALSE(b.IsSharedBufferWith(a));
  b.ShareBufferWith(a);
  EXPECT_TRUE(b.IsSharedBufferWith(a));
  EXPECT_TRUE(a.IsSharedBufferWith(b));
  EXPECT_EQ(b.data<float>()[2], 5.f);
  Tensor c;
  c.CopyFrom(a);
  EXPECT_FALSE(c.IsSharedBufferWith(a));
  EXPECT_EQ(c.data<float>()[2], 5.f);
}

TEST(TensorTest, TypedReadChecksDtypeAndData) {
  Tensor t(DataType::kINT64, {2});
  EXPECT_THROW(t.data<int64_t>(), Error);  // no data yet
  t.mutable_data<int64_t>();
  EXPECT_NO_THROW(t.data<int64_t>());
  try {
    t.data<float>();
    FAIL() << "expected a dtype error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected dtype f32, got i64"), std::string::npos) << e.what();
  }
}

TEST(ScopeTest, ChildSeesParentAndErases) {
  Scope parent;
  parent.Var("w")->GetMutable()->Resize({2});
  Scope child(&parent);
  EXPECT_EQ(child.FindVar("w"), parent.FindVar("w"));
  EXPECT_EQ(child.FindLocalVar("w"), nullptr);
  child.Var("x");
  EXPECT_NE(child.FindLocalVar("x"), nullptr);
  EXPECT_EQ(parent.FindVar("x"), nullptr);
  child.EraseVar("x");
  EXPECT_EQ(child.FindVar("x"), nullptr);
  EXPECT_THROW(child.GetVar("nope"), Error);
}

// origin: the program whose initialiser wrote the value (0: unknown); other
// writes through GetMutable (a training step) leave it.
TEST(ScopeTest, VariableOriginIsSetOnlyBySetOrigin) {
  Scope scope;
  Variable* v = scope.Var("w");
  EXPECT_EQ(v->origin(), 0);
  v->set_origin(7);
  v->GetMutable()->Resize({2});
  v->GetMutable()->mutable_data<float>()[0] = 1.f;
  EXPECT_EQ(v->origin(), 7);
  EXPECT_EQ(scope.FindVar("w")->origin(), 7);
  v->set_origin(0);
  EXPECT_EQ(v->origin(), 0);
}

}  // namespace
}  // namespace kiln
