// The reorder list of kiln dump (compiler/dump/reorder_list.h): the tags it
// writes, its text on a small cluster, and that it is what oneDNN runs: the
// reorder lines ONEDNN_VERBOSE prints while a compiled cluster runs, and
// while a small resnet trains one step, are the listed ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/dump/reorder_list.h"
#include "compiler/kernels/onednn/onednn_kernels.h"
#include "framework/allocator.h"
#include "framework/data/synthetic_tasks.h"
#include "framework/onednn/onednn_handler.h"
#include "framework/onednn/onednn_kernels.h"
#include "tests/builtin_model_test_util.h"
#include "tests/golden_util.h"
#include "tests/lowering_test_util.h"
#include "tests/op_test_util.h"

namespace kiln::test {
namespace {

using dnnl::memory;

// ---- What oneDNN prints ------------------------------------------------------

// "f32:aBcd16b" from a verbose memory descriptor "dst_f32::blocked:aBcd16b:f0".
std::string VerboseTag(const std::string& md) {
  const size_t type = md.find('_') + 1, colons = md.find("::");
  const size_t tag = md.find("blocked:", colons) + 8;
  return md.substr(type, colons - type) + ":" + md.substr(tag, md.find(':', tag) - tag);
}

// One reorder as "<from> -> <to> <dims as 2x13x9x7>": how both sides are
// compared.
std::string Key(const std::string& from, const std::string& to, const std::string& dims) {
  return from + " -> " + to + " " + dims;
}

std::string DimsX(const Dims& dims) {
  std::string s;
  for (int64_t d : dims) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

// The reorders among ONEDNN_VERBOSE's exec lines, e.g.
// "onednn_verbose,exec,cpu,reorder,jit:uni,undef,src_f32::blocked:abcd:f0
// dst_f32::blocked:aBcd16b:f0,,,2x13x9x7,0.0129", sorted. `others` counts
// the exec lines of other primitives.
std::vector<std::string> VerboseReorders(const std::string& out, int* others) {
  std::vector<std::string> keys;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("onednn_verbose,exec,", 0) != 0) continue;
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string s; std::getline(fields, s, ',');) f.push_back(s);
    if (f.size() < 8 || f[3] != "reorder") {
      ++*others;
      continue;
    }
    const std::string& mds = f[6];
    const size_t space = mds.find(' ');
    keys.push_back(Key(VerboseTag(mds.substr(0, space)), VerboseTag(mds.substr(space + 1)), f[f.size() - 2]));
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::vector<std::string> ListedKeys(const std::vector<jit::ListedReorder>& list) {
  std::vector<std::string> keys;
  for (const jit::ListedReorder& r : list) keys.push_back(Key(r.note.from, r.note.to, DimsX(r.note.dims)));
  std::sort(keys.begin(), keys.end());
  return keys;
}

// What `run` prints with oneDNN's verbose mode on (exec lines only).
template <typename Run>
std::string Verbose(Run run) {
  testing::internal::CaptureStdout();
  dnnl_set_verbose(1);
  run();
  dnnl_set_verbose(0);
  return testing::internal::GetCapturedStdout();
}

// ---- Tags ------------------------------------------------------------------

TEST(ReorderNoteTest, TagsAreOneDnnVerboseTags) {
  using tag = memory::format_tag;
  const memory::dims x = {2, 13, 9, 7};
  EXPECT_EQ(onednn::MemoryDescTag(onednn::PlainDesc({2, 13, 9, 7})), "f32:abcd");
  EXPECT_EQ(onednn::MemoryDescTag(memory::desc(x, memory::data_type::f32, tag::nChw16c)), "f32:aBcd16b");
  EXPECT_EQ(onednn::MemoryDescTag(memory::desc(x, memory::data_type::f32, tag::nhwc)), "f32:acdb");
  EXPECT_EQ(onednn::MemoryDescTag(memory::desc({32, 16, 3, 3}, memory::data_type::f32, tag::OIhw16i16o)),
            "f32:ABcd16b16a");
  EXPECT_EQ(onednn::MemoryDescTag(memory::desc({64, 32}, memory::data_type::bf16, tag::ab)), "bf16:ab");
  EXPECT_EQ(onednn::MemoryDescTag(memory::desc(x, memory::data_type::f32, tag::any)), "f32:any");
  // A [K, N] operand read transposed: strides {1, K}.
  EXPECT_EQ(onednn::MemoryDescTag(onednn::TransposedLastTwoDesc({64, 32})), "f32:ba");
}

TEST(ReorderNoteTest, NoteAndTotalsText) {
  const memory::desc plain = onednn::PlainDesc({2, 13, 9, 7});
  const memory::desc blocked({2, 13, 9, 7}, memory::data_type::f32, memory::format_tag::nChw16c);
  const onednn::ReorderNote in = onednn::NoteOf(plain, blocked, DNNL_ARG_DIFF_DST, false, "convolution backward_data");
  EXPECT_EQ(in.ToString(),
            "diff_dst in: f32:abcd -> f32:aBcd16b [2,13,9,7] 6552 -> 8064 B (convolution backward_data)");
  const onednn::ReorderNote out = onednn::NoteOf(blocked, plain, DNNL_ARG_DST, true, "convolution forward_training");
  EXPECT_EQ(out.ToString(),
            "dst out: f32:aBcd16b -> f32:abcd [2,13,9,7] 8064 -> 6552 B (convolution forward_training)");
  onednn::ReorderTotals t;
  EXPECT_EQ(t.ToString(), "no reorders");
  t.Add(in);
  EXPECT_EQ(t.ToString(), "1 reorder, " + FormatBytes(6552) + " read, " + FormatBytes(8064) + " written");
  t.Add(out);
  EXPECT_EQ(t.count, 2);
  EXPECT_EQ(t.bytes_read, 6552 + 8064);
}

// ---- A cluster ---------------------------------------------------------------

// conv2d, whose output leaves the cluster, and conv2d_grad: both run as
// framework ops inside the cluster (no lowering step takes a lone conv
// without a bias or activation), so their reorders come from the dry run of
// their oneDNN kernels. The resnet below runs the JIT's own oneDNN kernels.
LoweringCase ConvAndGrad(const Dims& x, const Dims& f) {
  LoweringCase c = ConvBiasAct("reorders_conv_and_grad", false, "", x, f, 1, 1, 1);
  c.ops.push_back(ConvGradOp("dconv", 1, 1));
  c.inputs.push_back({"dconv", {x[0], f[0], x[2], x[3]}});
  c.outputs = {"conv", "dx", "df"};
  return c;
}

std::map<std::string, Tensor> RandomInputs(const LoweringCase& c) {
  std::mt19937 rng(7);
  std::map<std::string, Tensor> in;
  for (const auto& [name, dims] : c.inputs) in[name] = RandomTensor(dims, DataType::kFP32, rng);
  return in;
}

TEST(ReorderListTest, TheListIsWhatOneDnnRunsInACluster) {
  const LoweringCase c = ConvAndGrad({2, 16, 9, 7}, {32, 16, 3, 3});
  const auto obj = LowerCase(c);
  const std::vector<jit::ListedReorder> list = jit::ListReorders(*obj);
  int grad = 0;
  for (const jit::ListedReorder& r : list) {
    grad += obj->program.instructions[r.instruction].kernel->name() == "conv2d_grad";
  }
  EXPECT_GT(grad, 0) << jit::ReordersText("c0", *obj, list) << obj->Listing();
  const std::map<std::string, Tensor> inputs = RandomInputs(c);
  RunCompiled(*obj, inputs);  // the first run creates what the dry run did not
  int others = 0;
  const std::vector<std::string> ran = VerboseReorders(Verbose([&] { RunCompiled(*obj, inputs); }), &others);
  EXPECT_GT(others, 0) << "no oneDNN exec line: is verbose mode compiled out?";
  EXPECT_EQ(ran, ListedKeys(list)) << jit::ReordersText("c0", *obj, list);
}

TEST(ReorderListTest, ListingRunsNoPrimitive) {
  const auto obj = LowerCase(ConvAndGrad({2, 16, 9, 7}, {32, 16, 3, 3}));
  jit::ListReorders(*obj);  // creates the primitives
  const int64_t runs = OneDnnKernelRuns("conv2d_grad");
  int others = 0;
  const std::vector<std::string> ran = VerboseReorders(Verbose([&] { jit::ListReorders(*obj); }), &others);
  EXPECT_TRUE(ran.empty());
  EXPECT_EQ(others, 0);
  // Nor counts as a run of the op's oneDNN kernel.
  EXPECT_EQ(OneDnnKernelRuns("conv2d_grad"), runs);
}

// The text on an AVX-512 CPU, where oneDNN's convolutions work in nChw16c.
TEST(ReorderListTest, Golden) {
  const Dims x = {2, 16, 9, 7}, f = {32, 16, 3, 3};
  jit::FusedConvSpec spec;
  spec.input_dims = x;
  spec.filter_dims = f;
  spec.strides = {1, 1};
  spec.paddings = {1, 1};
  spec.dilations = {1, 1};
  if (jit::ConvForwardDstLayout(spec, onednn::Settings{}) != ActLayout::kNChw16c) {
    GTEST_SKIP() << "the golden is an AVX-512 CPU's";
  }
  const auto obj = LowerCase(ConvAndGrad(x, f));
  std::string text = jit::ReordersText("c0", *obj, jit::ListReorders(*obj));
  // The key is a fingerprint of the case, not of the list.
  const size_t key = text.find("key="), end = text.find(' ', key);
  text.replace(key, end - key, "key=K");
  ExpectGolden(std::string(KILN_SOURCE_DIR) + "/tests/golden/dump/reorders_conv_and_grad.txt", text);
}

// ---- A training step ---------------------------------------------------------

// A resnet (8x8 images, widths 16 and 32, one block per stage) trained with
// kiln train's JIT pipeline: during step 2 oneDNN runs exactly the reorders
// listed for the clusters that step launches (each once).
TEST(ReorderListTest, AResnetStepRunsTheListedReorders) {
  ResnetConfig rc;
  rc.height = rc.width = 8;
  rc.widths = {16, 32};
  rc.blocks = 1;
  TrainConfig tc;
  tc.optimizer = OptimizerKind::kMomentum;
  tc.lr = 0.05f;
  const Model m = BuildResnet(rc, tc);
  const Dataset all = MakeSyntheticImages(64, 3, 8, 8, 10, /*seed=*/3);
  TestJit jit;
  TrainOptions o;
  o.epochs = 1000;
  o.batch_size = 8;
  o.max_steps = 2;
  o.registry = &jit.registry();
  o.program_transform = [&jit](const proto::ProgramDesc& p, const std::set<std::string>& keep) {
    return RunPipeline(p, KilnTrainPipeline(jit, keep), jit.registry());
  };
  o.before_step = [](int64_t step) {
    if (step == 2) {
      testing::internal::CaptureStdout();
      dnnl_set_verbose(1);
    }
  };
  std::string verbose;
  std::vector<std::shared_ptr<const jit::CompiledObject>> objects;
  o.on_step = [&](const TrainProgress& p) {
    if (p.step != 2) return;
    dnnl_set_verbose(0);
    verbose = testing::internal::GetCapturedStdout();
    objects = jit->cache().CachedObjects();
  };
  Train(m, all, all, o);
  ASSERT_FALSE(objects.empty());
  std::vector<jit::ListedReorder> list;
  std::string text;
  for (const auto& obj : objects) {
    const std::vector<jit::ListedReorder> l = jit::ListReorders(*obj);
    text += jit::ReordersText(obj->key, *obj, l);
    list.insert(list.end(), l.begin(), l.end());
  }
  int others = 0;
  const std::vector<std::string> ran = VerboseReorders(verbose, &others);
  EXPECT_GT(others, 0);
  EXPECT_FALSE(ran.empty());
  EXPECT_EQ(ran, ListedKeys(list)) << text;
}

}  // namespace
}  // namespace kiln::test
