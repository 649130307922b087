// framework/var_origin.h: which ops of a startup program initialise a var,
// which of them a scope's values make it skip, and the origin a run leaves.
#include "framework/var_origin.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "framework/program_io.h"
#include "tests/op_test_util.h"

namespace kiln {
namespace {

using test::ErrorOf;
using test::FloatTensor;

// w and b are initialised by fill ops; v is written by op 2 after op 1 read
// it (an update, not an initialiser); t is not persistable; c is written
// twice, the second write not a first touch.
const char* kStartup = R"pb(
blocks {
  idx: 0 parent_idx: -1
  vars { name: "w" dtype: FP32 dims: 2 persistable: true }
  vars { name: "b" dtype: FP32 dims: 1 persistable: true }
  vars { name: "v" dtype: FP32 dims: 2 persistable: true }
  vars { name: "c" dtype: FP32 dims: 2 persistable: true }
  vars { name: "t" dtype: FP32 dims: 2 }
  ops { type: "fill_constant" outputs { name: "Out" args: "w" }
        attrs { name: "shape" type: INTS ints: 2 } attrs { name: "value" type: FLOAT f: 1 } }
  ops { type: "scale" inputs { name: "X" args: "v" } outputs { name: "Out" args: "t" } }
  ops { type: "scale" inputs { name: "X" args: "t" } outputs { name: "Out" args: "v" } }
  ops { type: "fill_constant" outputs { name: "Out" args: "b" }
        attrs { name: "shape" type: INTS ints: 1 } attrs { name: "value" type: FLOAT f: 2 } }
  ops { type: "fill_constant" outputs { name: "Out" args: "c" }
        attrs { name: "shape" type: INTS ints: 2 } attrs { name: "value" type: FLOAT f: 3 } }
  ops { type: "scale" inputs { name: "X" args: "w" } outputs { name: "Out" args: "c" } }
}
)pb";

TEST(VarOriginTest, InitialisersAreFirstTouchesThatWriteWithoutReading) {
  const proto::ProgramDesc p = ParseProgramText(kStartup, "startup");
  const std::vector<Initialiser> got = InitialiserOps(p.blocks(0));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ((std::vector<std::string>{got[0].var, got[1].var, got[2].var}), (std::vector<std::string>{"w", "b", "c"}));
  EXPECT_EQ((std::vector<int>{got[0].op, got[1].op, got[2].op}), (std::vector<int>{0, 3, 4}));
  EXPECT_EQ(PersistableWrites(p.blocks(0)), (std::vector<std::string>{"w", "v", "b", "c"}));
}

TEST(VarOriginTest, AStartupProgramKeepsWhatAnotherProgramWroteAndRedoesItsOwn) {
  const proto::ProgramDesc p = ParseProgramText(kStartup, "startup");
  const auto inits = InitialiserOps(p.blocks(0));
  Scope scope;
  EXPECT_TRUE(KeptByScope(p.blocks(0), inits, 7, scope).kept.empty()) << "an empty scope keeps nothing";
  scope.Var("w")->GetMutable()->CopyFrom(FloatTensor({2}, {5, 6}));
  scope.Var("w")->set_origin(9);  // another program wrote it
  scope.Var("b")->GetMutable()->CopyFrom(FloatTensor({1}, {4}));
  scope.Var("b")->set_origin(7);  // this startup program did, and nothing since
  scope.Var("c")->GetMutable()->CopyFrom(FloatTensor({2}, {1, 1}));  // origin 0: loaded, fed or set
  const KeptVars k = KeptByScope(p.blocks(0), inits, 7, scope);
  EXPECT_EQ(k.kept, (std::vector<std::string>{"w", "c"}));
  EXPECT_EQ(k.skipped_ops, (std::vector<int>{0, 4}));
  MarkWritten(scope, PersistableWrites(p.blocks(0)), k.kept, 7);
  EXPECT_EQ(scope.FindVar("w")->origin(), 9);
  EXPECT_EQ(scope.FindVar("b")->origin(), 7);
  EXPECT_EQ(scope.FindVar("c")->origin(), 0);
  EXPECT_EQ(scope.FindVar("v"), nullptr) << "a var the scope does not hold gets no entry";
}

TEST(VarOriginTest, AKeptValueOfOtherDimsIsAnErrorNamingBoth) {
  const proto::ProgramDesc p = ParseProgramText(kStartup, "startup");
  Scope scope;
  scope.Var("w")->GetMutable()->CopyFrom(FloatTensor({3}, {1, 2, 3}));
  scope.Var("w")->set_origin(9);
  EXPECT_EQ(ErrorOf([&] { KeptByScope(p.blocks(0), InitialiserOps(p.blocks(0)), 7, scope); }),
            "startup program: 'w' is declared f32[2] but the scope holds it as f32[3] from another program (two "
            "programs sharing the name with other shapes): rename one, or erase it from the scope first");
}

}  // namespace
}  // namespace kiln
