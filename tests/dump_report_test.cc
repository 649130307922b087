// What kiln dump's index.md and --jit_explain say about shadow checks
// (tools/dump_report.h): the count, and each cluster a failed check denied,
// named by its id with the op, var and errors. The rest of the index is
// covered by dump_test's golden.
#include "tools/dump_report.h"

#include <gtest/gtest.h>

namespace kiln::tools {
namespace {

jit::ShadowFailure Failure() {
  jit::ShadowFailure f;
  f.key = "5e22d47fc69499d0";
  f.op = "op #5 'adam' (adam)";
  f.var = "fc0.w";
  f.shape = "f32[64,128]";
  f.max_abs_error = 0.5;
  f.max_rel_error = 2.0;
  f.mismatches = 3;
  f.numel = 8192;
  f.first_mismatch = "flat index 0: jit 1.5, framework 1";
  f.step = 7;
  f.launch = 7;
  return f;
}

TEST(DumpReportTest, IndexCountsShadowChecksAndNamesDeniedClusters) {
  JitSubgraph sg;
  ClusterRow row;
  row.id = "c1";
  row.key = "5e22d47fc69499d0";
  row.subgraph = &sg;
  row.failure = "denied";
  jit::JitStats stats;
  EXPECT_NE(IndexMarkdown("", {row}, {}, stats)
                .find("- shadow checks (--jit_shadow_every): 0 launches compared with the framework ops; clusters "
                      "denied by a failed check: none\n"),
            std::string::npos);
  EXPECT_EQ(ExplainText({row}, {}, stats).find("shadow"), std::string::npos) << "quiet when checks are off";

  stats.shadow_checks = 12;
  stats.shadow_failures = {Failure()};
  const std::string index = IndexMarkdown("", {row}, {}, stats);
  EXPECT_NE(index.find("12 launches compared with the framework ops; clusters denied by a failed check: 1\n"),
            std::string::npos)
      << index;
  EXPECT_NE(index.find("  - c1 (key 5e22d47fc69499d0), step 7, launch 7: op #5 'adam' (adam) writes 'fc0.w' "
                       "f32[64,128]: max abs error 0.5, max rel error 2, 3 of 8192 elements beyond the tolerance "
                       "(first at flat index 0: jit 1.5, framework 1)\n"),
            std::string::npos)
      << index;
  const std::string explain = ExplainText({row}, {}, stats);
  EXPECT_NE(explain.find("  shadow checks: 12, denied: c1 (fc0.w)\n"), std::string::npos) << explain;
}

}  // namespace
}  // namespace kiln::tools
