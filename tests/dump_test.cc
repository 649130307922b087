// kiln dump, --jit_dump_dir, --jit_explain and --jit_verbose through the
// command line. Goldens under tests/golden/dump/ (timing columns masked);
// regenerate with KILN_UPDATE_GOLDEN=1 and review the diff.
#include <gtest/gtest.h>

#include "framework/file_util.h"
#include "tests/cli_util.h"

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using kiln::ReadFile;
using Result = kiln::test::CliResult;

Result Kiln(const std::string& args) { return kiln::test::RunKiln(KILN_BINARY, args); }

bool HostHasAvx512() { return ReadFile("/proc/cpuinfo").find(" avx512f") != std::string::npos; }

std::vector<std::string> SplitCells(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cell += "\\|";
      ++i;
    } else if (line[i] == '|') {
      cells.push_back(cell);
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return cells;
}

// Replaces the values of table columns whose header says "(timing)" and the
// rest of any other line that says "(timing):" by "#".
std::string MaskTimings(const std::string& text) {
  std::stringstream in(text);
  std::string line, out;
  std::vector<bool> timing;  // columns of the current table
  bool in_table = false;
  while (std::getline(in, line)) {
    if (line.rfind("|", 0) == 0) {
      std::vector<std::string> cells = SplitCells(line);
      if (!in_table) {
        timing.clear();
        for (const auto& c : cells) timing.push_back(c.find("(timing)") != std::string::npos);
        in_table = true;
      } else if (line.rfind("|---", 0) != 0) {
        for (size_t i = 0; i < cells.size() && i < timing.size(); ++i) {
          if (timing[i]) cells[i] = " # ";
        }
        line = "|";
        for (const auto& c : cells) line += c + "|";
      }
    } else {
      in_table = false;
      const size_t t = line.find("(timing):");
      if (t != std::string::npos) line = line.substr(0, t + 9) + " #";
    }
    out += line + "\n";
  }
  return out;
}

void CheckGolden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(KILN_SOURCE_DIR) + "/tests/golden/dump/" + name;
  if (std::getenv("KILN_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(path) << actual;
    return;
  }
  EXPECT_EQ(ReadFile(path), actual) << "golden " << path << " differs; regenerate with KILN_UPDATE_GOLDEN=1 and review";
}

class DumpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/kiln_dump_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(std::system(("rm -rf " + dir_ + " && mkdir -p " + dir_).c_str()), 0);
  }
  std::string dir_;
};

TEST_F(DumpTest, MlpGoldenAndDeterministic) {
  if (!HostHasAvx512()) GTEST_SKIP() << "goldens hold AVX-512 kernels";
  const std::string args = "dump --model mlp --optimizer sgd --batch_size 32 --out ";
  const Result r = Kiln(args + dir_ + "/a");
  ASSERT_EQ(r.code, 0) << r.output;
  CheckGolden("mlp_index.md", MaskTimings(ReadFile(dir_ + "/a/index.md")));
  // The whole training step is one cluster (the loss ops run their
  // framework kernels inside it).
  CheckGolden("mlp_c0_subgraph.txt", ReadFile(dir_ + "/a/cluster_c0/subgraph.txt"));
  CheckGolden("mlp_c0_kernels.txt", ReadFile(dir_ + "/a/cluster_c0/kernels.txt"));
  CheckGolden("mlp_c0_aliases.txt", ReadFile(dir_ + "/a/cluster_c0/aliases.txt"));
  // Plain f32 matmuls: oneDNN reorders nothing (the list says so).
  CheckGolden("mlp_c0_reorders.txt", ReadFile(dir_ + "/a/cluster_c0/reorders.txt"));
  CheckGolden("mlp_c0_lowering.txt", ReadFile(dir_ + "/a/cluster_c0/lowering.txt"));
  for (const char* f : {"program.before.pbtxt", "program.after.pbtxt", "program.dot", "cluster_c0/ew_2.asm"}) {
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/a/" + f)) << f;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/a/cluster_c1"));
  EXPECT_NE(ReadFile(dir_ + "/a/program.dot").find("subgraph cluster_c0 {"), std::string::npos);
  EXPECT_NE(ReadFile(dir_ + "/a/program.after.pbtxt").find("jit_launch"), std::string::npos);

  // A second run writes the same files, timings aside.
  const Result r2 = Kiln(args + dir_ + "/b");
  ASSERT_EQ(r2.code, 0) << r2.output;
  EXPECT_EQ(MaskTimings(ReadFile(dir_ + "/a/index.md")), MaskTimings(ReadFile(dir_ + "/b/index.md")));
  // index.html embeds index.md's tables: the same but for their timings.
  EXPECT_EQ(MaskTimings(ReadFile(dir_ + "/a/index.html")), MaskTimings(ReadFile(dir_ + "/b/index.html")));
  EXPECT_EQ(std::system(("diff -r -x index.md -x index.html " + dir_ + "/a " + dir_ + "/b >/dev/null").c_str()), 0);
}

// --optimizer adamw (decay 0.01 from the command line): each parameter's
// update, decoupled decay included, is one generated kernel whose program
// scales the parameter by 1 - lr * 0.01 before Adam's step.
TEST_F(DumpTest, AdamwDecayIsInsideTheGeneratedUpdateKernel) {
  const Result r = Kiln("dump --model mlp --optimizer adamw --batch_size 32 --out " + dir_ + "/w");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string kernels = ReadFile(dir_ + "/w/cluster_c0/kernels.txt");
  std::stringstream in(kernels);
  std::string line, section;
  int fused = 0, decayed = 0;
  std::vector<std::string> sections;
  while (std::getline(in, line)) {
    const std::string tail = "fusing adamw";
    if (line.size() >= tail.size() && line.compare(line.size() - tail.size(), tail.size(), tail) == 0) {
      EXPECT_NE(line.find("generated"), std::string::npos) << line;
      ++fused;
    }
    if (line.rfind("# kernel ", 0) == 0) {
      sections.push_back(section);
      section.clear();
    }
    section += line + "\n";
  }
  sections.push_back(section);
  for (const std::string& k : sections) {
    if (k.find(" ops=[adamw] ") == std::string::npos) continue;
    // %a = const 0.00999999978; %b = mul lr, %a; %c = sub 1, %b; %d = mul param, %c.
    EXPECT_NE(k.find("= const 0.00999999978\n"), std::string::npos) << k;
    ++decayed;
  }
  EXPECT_EQ(fused, 4) << kernels;  // fc0.w, fc0.b, fc1.w, fc1.b
  EXPECT_EQ(decayed, 4) << kernels;
  EXPECT_EQ(kernels.find("framework kernel (reference) adamw"), std::string::npos) << kernels;
}

// --grad_clip_norm: one clip_by_global_norm (a framework kernel) reads the
// gradients, and each sgd stays one generated kernel that reads its Scale
// and multiplies the gradient by it (no pass scaling the gradients, none
// over the weights); the weight-gradient fold into sgd does not apply.
TEST_F(DumpTest, GlobalNormClipScaleIsInsideTheGeneratedUpdateKernels) {
  const Result r = Kiln("dump --model mlp --grad_clip_norm 1 --batch_size 32 --out " + dir_ + "/c");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string kernels = ReadFile(dir_ + "/c/cluster_c0/kernels.txt");
  std::stringstream in(kernels);
  std::string line, section;
  int norms = 0, fused = 0, scaled = 0;
  std::vector<std::string> sections;
  while (std::getline(in, line)) {
    if (line.find("# framework kernel (reference) clip_by_global_norm") != std::string::npos) ++norms;
    const std::string tail = "fusing sgd";
    if (line.size() >= tail.size() && line.compare(line.size() - tail.size(), tail.size(), tail) == 0) {
      EXPECT_NE(line.find("generated"), std::string::npos) << line;
      // The scale is the kernel's last input (in3).
      EXPECT_NE(line.find(":grad_clip_scale_0 -> "), std::string::npos) << line;
      ++fused;
    }
    if (line.rfind("# kernel ", 0) == 0) {
      sections.push_back(section);
      section.clear();
    }
    section += line + "\n";
  }
  sections.push_back(section);
  for (const std::string& k : sections) {
    if (k.find(" ops=[sgd] ") == std::string::npos) continue;
    // p - lr * (g * scale): in1 the gradient, in3 the scale read at every point.
    EXPECT_NE(k.find(" in3=[0] "), std::string::npos) << k;
    EXPECT_NE(k.find("%4 = mul %1, %3\n"), std::string::npos) << k;
    ++scaled;
  }
  EXPECT_EQ(norms, 1) << kernels;
  EXPECT_EQ(fused, 4) << kernels;  // fc0.w, fc0.b, fc1.w, fc1.b
  EXPECT_EQ(scaled, 4) << kernels;
  EXPECT_EQ(kernels.find("W -= lr * X^T dY"), std::string::npos) << kernels;
}

// --lr_schedule: the lr_schedule op is in the cluster with the updates, as
// its framework kernel, first (so sgd's weight-gradient folds still fire),
// and updates its step counter in place.
TEST_F(DumpTest, LrScheduleRunsInsideTheCluster) {
  const Result r = Kiln("dump --model mlp --batch_size 32 --lr_schedule cosine:T_max=10 --out " + dir_ + "/s");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(ReadFile(dir_ + "/s/index.md").find("None: every op is in a cluster."), std::string::npos);
  const std::string kernels = ReadFile(dir_ + "/s/cluster_c0/kernels.txt");
  EXPECT_NE(kernels.find("0: lr_schedule (%1:learning_rate.step -> %0:learning_rate, %1:learning_rate.step)  # "
                         "framework kernel (reference) lr_schedule"),
            std::string::npos)
      << kernels;
  size_t folds = 0;
  for (size_t at = kernels.find("W -= lr * X^T dY"); at != std::string::npos; at = kernels.find("W -= lr", at + 1)) {
    ++folds;
  }
  EXPECT_EQ(folds, 2u) << kernels;  // fc0.w, fc1.w
  const std::string aliases = ReadFile(dir_ + "/s/cluster_c0/aliases.txt");
  EXPECT_NE(aliases.find("instruction 0 (lr_schedule) reads and writes %1:learning_rate.step in place"),
            std::string::npos)
      << aliases;
}

// The transformer's attention is fused (attention_fusion_pass) and its
// forward and backward land in different clusters: the backward's cluster
// reads the LSE the pass made, which the dump shapes from the subgraph.
TEST_F(DumpTest, TransformerAttentionIsFusedAcrossClusters) {
  Result r = Kiln("dump --model transformer --batch_size 4 --out " + dir_ + "/t");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(ReadFile(dir_ + "/t/cluster_c0/kernels.txt").find("kiln tiled attention forward, 16 heads, 16 queries x 16 "
                                                         "keys, head dims 8/8"),
            std::string::npos);
  const std::string c1 = ReadFile(dir_ + "/t/cluster_c1/kernels.txt");
  EXPECT_NE(c1.find(":matmul_4.lse, "), std::string::npos) << c1;
  EXPECT_NE(c1.find("kiln tiled attention backward"), std::string::npos) << c1;
  const std::string c0 = ReadFile(dir_ + "/t/cluster_c0/subgraph.txt");
  EXPECT_NE(c0.find(" = fused_attention[causal=false"), std::string::npos) << c0;
  EXPECT_EQ(c0.find(" = softmax("), std::string::npos) << c0;

  r = Kiln("dump --model transformer --batch_size 4 --fuse_attention=false --out " + dir_ + "/u");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(ReadFile(dir_ + "/u/cluster_c0/kernels.txt").find("attention"), std::string::npos);
  EXPECT_NE(ReadFile(dir_ + "/u/cluster_c0/subgraph.txt").find(" = softmax("), std::string::npos);
  EXPECT_NE(ReadFile(dir_ + "/u/index.md").find("pass pipeline: decomposition_fusion_pass, recompute_pass, build_jit_pass"), std::string::npos);
}

// The ResNet (213 ops, 579 ops and vars) is over the drawing limit: its
// program graph is drawn at cluster granularity, its cluster by its ops
// alone, and the dump finishes (Graphviz took minutes on the op-by-op graph
// and held the whole dump back). Every file is whole, drawn or not.
TEST_F(DumpTest, ResnetFinishesDrawnAtClusterGranularity) {
  const auto start = std::chrono::steady_clock::now();
  const Result r = Kiln("dump --model resnet --batch_size 32 --out " + dir_ + "/r");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_LT(seconds, 120.0) << "a few seconds on an idle machine";
  const std::string dot = ReadFile(dir_ + "/r/program.dot");
  EXPECT_EQ(dot.rfind("// cluster granularity: the program has 579 ops and vars, over the drawing limit of 300", 0), 0u)
      << dot;
  EXPECT_NE(dot.find("URL=\"#c0\""), std::string::npos) << dot;
  EXPECT_EQ(dot.find("shape=ellipse"), std::string::npos) << "no var nodes at cluster granularity";
  EXPECT_NE(ReadFile(dir_ + "/r/cluster_c0/graph.dot").find("its ops alone"), std::string::npos);
  // The convolutions' reorders are listed, their total in the summary and index.md.
  EXPECT_NE(ReadFile(dir_ + "/r/cluster_c0/reorders.txt").find("(convolution backward_weights)"), std::string::npos);
  EXPECT_NE(r.output.find("  oneDNN reorders: "), std::string::npos) << r.output;
  EXPECT_NE(ReadFile(dir_ + "/r/index.md").find("\n- total: "), std::string::npos);
  const std::string html = ReadFile(dir_ + "/r/index.html");
  EXPECT_NE(html.find("Drawn at cluster granularity"), std::string::npos);
  // Each graph is in the page, or the page says why not.
  const bool drawn = std::filesystem::exists(dir_ + "/r/program.svg");
  EXPECT_EQ(drawn, html.find("The program graph is not drawn") == std::string::npos);
  EXPECT_EQ(std::filesystem::exists(dir_ + "/r/cluster_c0/graph.svg"), html.find("Not drawn: ") == std::string::npos);
  // Whole files only: each ends as its format ends, none is a temporary.
  const std::vector<std::pair<std::string, std::string>> endings = {
      {".svg", "</svg>\n"}, {".html", "</html>\n"}, {".dot", "}\n"}, {".md", "\n"},
      {".txt", "\n"},       {".asm", "\n"},         {".pbtxt", "}\n"}};
  int files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_ + "/r")) {
    if (!entry.is_regular_file()) continue;
    ++files;
    const std::string path = entry.path().string();
    const std::string text = ReadFile(path);
    bool known = false;
    for (const auto& [ext, end] : endings) {
      if (entry.path().extension() != ext) continue;
      known = true;
      EXPECT_TRUE(text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0) << path;
    }
    EXPECT_TRUE(known) << "unexpected file " << path;
  }
  EXPECT_GT(files, 10);
}

TEST_F(DumpTest, DisassemblyShowsTheVectorCode) {
  const std::string program = std::string(KILN_SOURCE_DIR) + "/tests/data/dump/add_relu.pbtxt";
  if (HostHasAvx512()) {
    const Result r = Kiln("dump --program " + program + " --batch_size 8 --jit_isa avx512 --out " + dir_ + "/z");
    ASSERT_EQ(r.code, 0) << r.output;
    const std::string asm_text = ReadFile(dir_ + "/z/cluster_c0/ew_0.asm");
    EXPECT_NE(asm_text.find("; kernel ew_0"), std::string::npos) << asm_text;
    EXPECT_NE(asm_text.find("; fuses: elementwise_add, relu"), std::string::npos) << asm_text;
    EXPECT_NE(asm_text.find("vaddps zmm"), std::string::npos) << asm_text;
    EXPECT_NE(asm_text.find("vmaxps zmm"), std::string::npos) << asm_text;
    EXPECT_NE(asm_text.find("  ret\n"), std::string::npos) << asm_text;
  }
  const Result r = Kiln("dump --program " + program + " --batch_size 8 --jit_isa avx2 --out " + dir_ + "/y");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string asm_text = ReadFile(dir_ + "/y/cluster_c0/ew_0.asm");
  EXPECT_NE(asm_text.find("vaddps ymm"), std::string::npos) << asm_text;
  EXPECT_EQ(asm_text.find("zmm"), std::string::npos) << asm_text;
  EXPECT_NE(ReadFile(dir_ + "/y/index.md").find("| elementwise_add, relu |"), std::string::npos);
}

TEST_F(DumpTest, ExplainWhyNamesCycleAndDenyList) {
  const std::string golden = std::string(KILN_SOURCE_DIR) + "/tests/golden/build_jit_pass/";
  // The program's softmax_with_cross_entropy stands for an op the JIT may
  // not take (build_jit_pass_test denies it the same way).
  Result r = Kiln("dump --program " + golden + "diamond_cycle.pbtxt --jit_deny_ops softmax_with_cross_entropy --out " +
                  dir_ + "/cycle");
  ASSERT_EQ(r.code, 0) << r.output;
  std::string index = ReadFile(dir_ + "/cycle/index.md");
  EXPECT_NE(index.find("| op #3 'elementwise_add' | elementwise_add | cycle | merging op #2 'exp' with op #3 "
                       "'elementwise_add' would create a cycle through op #1 'softmax_with_cross_entropy' |"),
            std::string::npos)
      << index;
  EXPECT_NE(index.find("| op #1 'softmax_with_cross_entropy' | softmax_with_cross_entropy | denied |"),
            std::string::npos)
      << index;

  r = Kiln("dump --program " + golden + "deny_list.pbtxt --jit_deny_ops exp --out " + dir_ + "/deny");
  ASSERT_EQ(r.code, 0) << r.output;
  index = ReadFile(dir_ + "/deny/index.md");
  EXPECT_NE(index.find("| op #1 'exp' | exp | denied | type is in deny_ops |"), std::string::npos) << index;
  EXPECT_NE(index.find("| op #0 'relu' | relu | too_small |"), std::string::npos) << index;
  // The short form on stdout says the same.
  EXPECT_NE(r.output.find("left out op #1 'exp': denied (type is in deny_ops)"), std::string::npos) << r.output;
}

TEST_F(DumpTest, TrainDumpsEachCompileExplainsAndLogsRecompiles) {
  // Digits: 1437 training rows in batches of 32 (the last partial batch is
  // dropped), evaluation in batches of --eval_batch_size 256: 360 test rows
  // end in a batch of 104.
  const Result r = Kiln("train --model mlp --use_jit --epochs 1 --progress=false --jit_explain --jit_verbose 1 "
                        "--eval_batch_size 256 --jit_dump_dir " + dir_ + "/jd");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("recompiles: input features dims [256,64] -> [104,64]"), std::string::npos) << r.output;
  // The training step is one cluster, evaluation's forward and loss another.
  EXPECT_NE(r.output.find("kiln jit explain: 2 clusters, 0 ops left out"), std::string::npos) << r.output;
  // One folder per key and signature: the evaluation cluster has two.
  int folders = 0, forward = 0;
  FILE* ls = ::popen(("ls " + dir_ + "/jd").c_str(), "r");
  char name[512];
  while (std::fscanf(ls, "%511s", name) == 1) {
    ++folders;
    forward += std::string(name).rfind("cluster_c1_", 0) == 0;
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/jd/" + name + "/subgraph.txt")) << name;
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/jd/" + name + "/kernels.txt")) << name;
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/jd/" + name + "/aliases.txt")) << name;
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/jd/" + name + "/reorders.txt")) << name;
  }
  ::pclose(ls);
  EXPECT_EQ(folders, 3);
  EXPECT_EQ(forward, 2);

  // Without the flags: no explain, no recompile log.
  const Result quiet = Kiln("train --model mlp --use_jit --epochs 1 --progress=false");
  ASSERT_EQ(quiet.code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("kiln jit explain"), std::string::npos);
  EXPECT_EQ(quiet.output.find("recompiles"), std::string::npos);
}

TEST_F(DumpTest, BadArgumentsFail) {
  Result r = Kiln("dump --model mlp");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--out DIR is required"), std::string::npos) << r.output;
  r = Kiln("dump --model nope --out " + dir_ + "/x");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("unknown model 'nope'"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/x/index.md"));
  r = Kiln("dump --program " + dir_ + "/missing.pbtxt --out " + dir_ + "/x");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("missing.pbtxt"), std::string::npos) << r.output;
}

}  // namespace
