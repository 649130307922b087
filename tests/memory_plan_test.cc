// runtime/memory_plan.cc (PlanArena): temps in the arena, first fit over live
// ranges; temps in donatable inputs that die in the program (donors), in
// place over a dying input where the instruction allows it; views (not
// placed, their root's region and offset; a root lives as long as its
// views are used); without reuse, a slot per root; the schedule of frees
// and output allocations; 400 random plans never overlap live temps.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "runtime/program.h"
#include "tests/memory_test_util.h"

namespace kiln {
namespace {

using runtime::BufferRole;
using test::Buffer;
using test::Ins;
using test::ViewOf;

// %0 x (input, dies here, 256 floats), %1 w (input), %2 a, %3 b, %4 c temps, %5 out.
//   0: a = f(x, w)   1: b = g(x, a)   2: c = h(b)   3: out = k(c, w)
// x is read for the last time at 1: c (written at 2) may take its memory,
// b (written at 1, while x is still read) may not.
runtime::BufferPlan SmallPlan(int64_t c_floats, bool x_donatable = true) {
  runtime::BufferPlan plan;
  plan.buffers = {Buffer("x", BufferRole::kInput, 256, 0, x_donatable), Buffer("w", BufferRole::kInput, 256, 1),
                  Buffer("a", BufferRole::kTemp, 100), Buffer("b", BufferRole::kTemp, 200),
                  Buffer("c", BufferRole::kTemp, c_floats), Buffer("out", BufferRole::kOutput, 8, 0)};
  return plan;
}
const std::vector<runtime::Instruction>& SmallInstructions() {
  static const std::vector<runtime::Instruction> ins = {Ins({0, 1}, {2}), Ins({0, 2}, {3}), Ins({3}, {4}),
                                                        Ins({4, 1}, {5})};
  return ins;
}

TEST(PlanArenaDonorTest, TempWrittenAfterTheLastReadGoesIntoTheDyingInput) {
  runtime::BufferPlan plan = SmallPlan(256);
  runtime::PlanArena(SmallInstructions(), &plan, /*reuse=*/true);
  EXPECT_EQ(plan.buffers[4].region, 0) << "c fits exactly in x, written after x's last read";
  EXPECT_EQ(plan.buffers[4].offset, 0u);
  EXPECT_EQ(plan.buffers[3].region, -1) << "b is written by the instruction that last reads x";
  EXPECT_EQ(plan.buffers[2].region, -1);
  EXPECT_EQ(plan.donors, std::vector<int>{0});
  EXPECT_EQ(plan.donated_bytes, 1024u);
  // a [0,1] and b [1,2] overlap at 1: separate arena slots, the larger b first.
  EXPECT_EQ(plan.buffers[3].offset, 0u);
  EXPECT_EQ(plan.buffers[2].offset, 832u);
  EXPECT_EQ(plan.arena_bytes, 448u + 832u);
  EXPECT_EQ(plan.arena_bytes_no_reuse, 448u + 832u + 1024u);
  // The most in use at one instruction: a and b at 1, no packing smaller.
  const runtime::ArenaPeak peak = runtime::ArenaPeakOf(SmallInstructions(), plan);
  EXPECT_EQ(peak.bytes, 448u + 832u);
  EXPECT_EQ(peak.instruction, 1);
  EXPECT_EQ(peak.live, (std::vector<int>{2, 3}));
}

// Scratch lives at its instruction alone: it goes where no temp is live
// then (the hole a dead temp left), and grows the arena only past that.
TEST(PlanArenaScratchTest, ScratchTakesTheMemoryOfTempsDeadAtItsInstruction) {
  runtime::BufferPlan plan = SmallPlan(257, /*x_donatable=*/false);
  std::vector<runtime::Instruction> ins = SmallInstructions();
  // 3: out = k(c, w) with 1000 bytes of scratch: c (1088 bytes at 0) is
  // live there, b (832 bytes at 1088) is not.
  ins[3] = Ins({4, 1}, {5}, std::make_shared<test::ScratchKernel>(800));
  runtime::PlanArena(ins, &plan, /*reuse=*/true);
  EXPECT_EQ(plan.temp_arena_bytes, 1088u + 832u);
  ASSERT_EQ(plan.scratch_offset.size(), 4u);
  EXPECT_EQ(plan.scratch_offset[0], runtime::BufferPlan::kNoScratch);
  EXPECT_EQ(plan.scratch_offset[3], 1088u);
  EXPECT_EQ(plan.arena_bytes, 1088u + 832u) << "the scratch fits where b was";
  EXPECT_EQ(plan.scratch_bytes, 832u);
  // Bigger than the hole: the arena grows by the difference only.
  ins[3] = Ins({4, 1}, {5}, std::make_shared<test::ScratchKernel>(2000));
  runtime::PlanArena(ins, &plan, true);
  EXPECT_EQ(plan.scratch_offset[3], 1088u);
  EXPECT_EQ(plan.arena_bytes, 1088u + 2048u);
  EXPECT_EQ(plan.temp_arena_bytes, 1088u + 832u);
  const runtime::ArenaPeak peak = runtime::ArenaPeakOf(ins, plan);
  EXPECT_EQ(peak.bytes, 1088u + 2048u);
  EXPECT_EQ(peak.instruction, 3);
  // Without reuse: one slot after the temps, shared by every instruction.
  runtime::PlanArena(ins, &plan, false);
  EXPECT_EQ(plan.scratch_offset[3], plan.temp_arena_bytes);
  EXPECT_EQ(plan.arena_bytes, plan.temp_arena_bytes + 2048u);
}

TEST(PlanArenaDonorTest, TempTooBigForTheInputGoesToTheArena) {
  runtime::BufferPlan plan = SmallPlan(257);
  runtime::PlanArena(SmallInstructions(), &plan, true);
  EXPECT_EQ(plan.buffers[4].region, -1);
  EXPECT_TRUE(plan.donors.empty());
  EXPECT_EQ(plan.donated_bytes, 0u);
  // c [2,3] (1088 bytes, placed first) overlaps b [1,2] (832 bytes, after it) but not a [0,1] (at 0 too).
  EXPECT_EQ(plan.buffers[4].offset, 0u);
  EXPECT_EQ(plan.buffers[3].offset, 1088u);
  EXPECT_EQ(plan.buffers[2].offset, 0u);
  EXPECT_EQ(plan.arena_bytes, 1088u + 832u);
}

// An instruction that allows an output over a dying input (Instruction::
// inplace, from Kernel::InplacePairs) gets it there: over an arena temp at the
// temp's offset, over a donatable input at its start; never over an input
// read later, nor when the output is bigger.
TEST(PlanArenaDonorTest, InPlacePairsPutTheOutputOverTheDyingInput) {
  // 0: a = f(x)   1: b = g(a) in place over a   2: c = h(b) in place over b,
  // but c is bigger than b   3: out = k(c, w).
  auto plan_for = [](int64_t c_floats, bool allow) {
    runtime::BufferPlan plan;
    plan.buffers = {Buffer("x", BufferRole::kInput, 256, 0, true), Buffer("w", BufferRole::kInput, 256, 1),
                    Buffer("a", BufferRole::kTemp, 100), Buffer("b", BufferRole::kTemp, 100),
                    Buffer("c", BufferRole::kTemp, c_floats), Buffer("out", BufferRole::kOutput, 8, 0)};
    std::vector<runtime::Instruction> ins = {Ins({0}, {2}), Ins({2}, {3}), Ins({3}, {4}), Ins({4, 1}, {5})};
    if (allow) {
      ins[0].inplace = {{0, 1}};  // a over x
      ins[1].inplace = {{0, 1}};  // b over a
      ins[2].inplace = {{0, 1}};  // c over b
    }
    runtime::PlanArena(ins, &plan, true);
    return plan;
  };
  {
    const runtime::BufferPlan plan = plan_for(/*c_floats=*/100, true);
    // a over x (a donatable input that dies at 0), b over a, c over b.
    for (int t : {2, 3, 4}) {
      EXPECT_EQ(plan.buffers[t].region, 0) << plan.buffers[t].name;
      EXPECT_EQ(plan.buffers[t].offset, 0u) << plan.buffers[t].name;
    }
    EXPECT_EQ(plan.arena_bytes, 0u);
    EXPECT_EQ(plan.donors, (std::vector<int>{0}));
  }
  {
    const runtime::BufferPlan plan = plan_for(/*c_floats=*/101, true);
    EXPECT_EQ(plan.buffers[3].region, 0);
    // c does not fit over b: it goes beside b in x's memory (b is live at 2).
    EXPECT_EQ(plan.buffers[4].region, 0);
    EXPECT_EQ(plan.buffers[4].offset, 448u);
    EXPECT_EQ(plan.arena_bytes, 0u);
  }
  {
    // Without the pairs: a is written while x is read (arena); b is written
    // after x's last read (into x); nothing shares memory at an instruction.
    const runtime::BufferPlan plan = plan_for(/*c_floats=*/100, false);
    EXPECT_EQ(plan.buffers[2].region, -1);
    EXPECT_EQ(plan.buffers[3].region, 0);
    EXPECT_EQ(plan.buffers[4].region, 0);
    EXPECT_NE(plan.buffers[3].offset, plan.buffers[4].offset) << "b and c are both live at instruction 2";
  }
  {
    // The input is read again later: no in-place output over it.
    runtime::BufferPlan plan;
    plan.buffers = {Buffer("x", BufferRole::kInput, 256, 0, true), Buffer("a", BufferRole::kTemp, 100),
                    Buffer("out", BufferRole::kOutput, 8, 0)};
    std::vector<runtime::Instruction> ins = {Ins({0}, {1}), Ins({1, 0}, {2})};
    ins[0].inplace = {{0, 1}};
    runtime::PlanArena(ins, &plan, true);
    EXPECT_EQ(plan.buffers[1].region, -1);
  }
}

TEST(PlanArenaDonorTest, NoDonationWithoutReuseOrFromAnInputThatDoesNotDie) {
  {
    runtime::BufferPlan plan = SmallPlan(64);
    runtime::PlanArena(SmallInstructions(), &plan, /*reuse=*/false);
    for (const auto& b : plan.buffers) {
      if (b.role == BufferRole::kTemp) {
        EXPECT_EQ(b.region, -1) << b.name;
      }
    }
    EXPECT_TRUE(plan.donors.empty());
    EXPECT_EQ(plan.donated_bytes, 0u);
    EXPECT_EQ(plan.arena_bytes, plan.arena_bytes_no_reuse);
    EXPECT_EQ(plan.buffers[4].offset, 448u + 832u);
  }
  {
    runtime::BufferPlan plan = SmallPlan(64, /*x_donatable=*/false);
    runtime::PlanArena(SmallInstructions(), &plan, true);
    EXPECT_EQ(plan.buffers[4].region, -1);
    EXPECT_TRUE(plan.donors.empty());
  }
  {
    // Two inputs dying at 0: a temp goes into the smallest one it fits in
    // beside the temps already there.
    runtime::BufferPlan plan;
    plan.buffers = {Buffer("big", BufferRole::kInput, 1000, 0, true), Buffer("small", BufferRole::kInput, 100, 1, true),
                    Buffer("t1", BufferRole::kTemp, 50), Buffer("t2", BufferRole::kTemp, 60),
                    Buffer("t3", BufferRole::kTemp, 500), Buffer("out", BufferRole::kOutput, 1, 0)};
    const std::vector<runtime::Instruction> ins = {Ins({0, 1}, {2}), Ins({2}, {3}), Ins({2, 3}, {4}),
                                                   Ins({4}, {5})};
    runtime::PlanArena(ins, &plan, true);
    EXPECT_EQ(plan.buffers[3].region, 1) << "t2 fits in the smaller dying input";
    EXPECT_EQ(plan.buffers[4].region, 0) << "t3 only fits in the big one";
    EXPECT_EQ(plan.buffers[2].region, -1) << "t1 is written while both inputs are read";
    EXPECT_EQ(plan.donors, (std::vector<int>{0, 1}));
  }
}

// A random plan for `trial`: 1-4 inputs (the first donatable, the others at
// random; some FP64), 2-13 instructions reading 1-3 earlier buffers and
// writing 1-2 temps or outputs; last, a temp no instruction names.
runtime::BufferPlan RandomPlan(std::mt19937& rng, int trial, std::vector<runtime::Instruction>* instructions) {
  std::uniform_int_distribution<int> coin(0, 1);
  runtime::BufferPlan plan;
  const int n_inputs = 1 + static_cast<int>(rng() % 4);
  std::uniform_int_distribution<int64_t> size(1, trial % 3 == 0 ? 40 : 600);
  std::vector<int> available;
  for (int i = 0; i < n_inputs; ++i) {
    const int64_t floats = size(rng);
    const bool donatable = coin(rng) == 1 || i == 0;
    plan.buffers.push_back(Buffer("in" + std::to_string(i), BufferRole::kInput, floats, i, donatable));
    if (rng() % 5 == 0) plan.buffers.back().dtype = DataType::kFP64;
    available.push_back(i);
  }
  const int n_ins = 2 + static_cast<int>(rng() % 12);
  instructions->clear();
  int outputs = 0;
  for (int k = 0; k < n_ins; ++k) {
    std::vector<int> reads;
    const int n_reads = 1 + static_cast<int>(rng() % 3);
    for (int r = 0; r < n_reads; ++r) {
      const int b = available[rng() % available.size()];
      if (std::find(reads.begin(), reads.end(), b) == reads.end()) reads.push_back(b);
    }
    std::vector<int> writes;
    const int n_writes = 1 + static_cast<int>(rng() % 2);
    for (int w = 0; w < n_writes; ++w) {
      const int id = static_cast<int>(plan.buffers.size());
      const bool out = rng() % 6 == 0;
      const int64_t floats = size(rng);
      plan.buffers.push_back(Buffer((out ? "out" : "t") + std::to_string(id),
                                    out ? BufferRole::kOutput : BufferRole::kTemp, floats, out ? outputs++ : -1));
      writes.push_back(id);
      available.push_back(id);
    }
    instructions->push_back(Ins(reads, writes));
  }
  // A temp no instruction names is left alone.
  plan.buffers.push_back(Buffer("unused", BufferRole::kTemp, 10));
  plan.buffers.back().region = -1;
  return plan;
}

// Random plans: temps sharing a region never overlap in bytes while both are
// live; donated temps start after the donor's last read and end within it;
// temps in an output end before its first write and within it.
TEST(PlanArenaDonorTest, RandomPlansNeverOverlapLiveTemps) {
  std::mt19937 rng(2024);
  int plans_with_donors = 0, donated_temps = 0, plans_with_output_regions = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<runtime::Instruction> ins;
    runtime::BufferPlan plan = RandomPlan(rng, trial, &ins);
    const int n = static_cast<int>(plan.buffers.size());
    std::vector<int> first(n, 1 << 30), last(n, -1);
    for (int k = 0; k < static_cast<int>(ins.size()); ++k) {
      for (int b : ins[k].args) {
        first[b] = std::min(first[b], k);
        last[b] = std::max(last[b], k);
      }
    }
    runtime::BufferPlan copy = plan;
    runtime::PlanArena(ins, &plan, true);
    runtime::PlanArena(ins, &copy, true);
    EXPECT_LE(runtime::ArenaPeakOf(ins, plan).bytes, plan.arena_bytes) << "the live peak bounds any packing";
    SCOPED_TRACE("trial " + std::to_string(trial));
    size_t no_reuse = 0, donated = 0, in_outputs = 0;
    std::set<int> regions, output_regions;
    for (int b = 0; b < n; ++b) {
      const auto& info = plan.buffers[b];
      EXPECT_EQ(info.offset, copy.buffers[b].offset) << "not deterministic";
      EXPECT_EQ(info.region, copy.buffers[b].region) << "not deterministic";
      if (info.role != BufferRole::kTemp || last[b] < 0) continue;
      const size_t aligned = (std::max<size_t>(info.bytes(), 1) + 63) / 64 * 64;
      no_reuse += aligned;
      EXPECT_EQ(info.offset % 64, 0u) << info.name;
      if (info.region < 0) {
        EXPECT_EQ(info.region, -1);
        EXPECT_LE(info.offset + info.bytes(), plan.arena_bytes) << info.name;
        continue;
      }
      ASSERT_LT(info.region, n);
      const auto& donor = plan.buffers[info.region];
      if (donor.role == BufferRole::kOutput) {  // an output not written yet: before its first use, within it
        EXPECT_LT(last[b], first[info.region]) << info.name << " in " << donor.name;
        EXPECT_LE(info.offset + info.bytes(), donor.bytes()) << info.name << " ends past " << donor.name;
        in_outputs += aligned;
        output_regions.insert(info.region);
        continue;
      }
      EXPECT_EQ(donor.role, BufferRole::kInput) << info.name;
      EXPECT_TRUE(donor.donatable) << info.name << " in " << donor.name;
      EXPECT_LT(last[info.region], first[b]) << info.name << " written before " << donor.name << "'s last read";
      EXPECT_LE(info.offset + info.bytes(), donor.bytes()) << info.name << " ends past " << donor.name;
      donated += aligned;
      regions.insert(info.region);
      ++donated_temps;
    }
    plans_with_donors += !regions.empty();
    EXPECT_EQ(plan.arena_bytes_no_reuse, no_reuse);
    EXPECT_LE(plan.arena_bytes, plan.arena_bytes_no_reuse);
    EXPECT_EQ(plan.donated_bytes, donated);
    EXPECT_EQ(plan.donors, std::vector<int>(regions.begin(), regions.end()));
    EXPECT_EQ(plan.output_region_bytes, in_outputs);
    EXPECT_EQ(plan.output_regions, std::vector<int>(output_regions.begin(), output_regions.end())) << "sorted";
    plans_with_output_regions += !output_regions.empty();
    EXPECT_EQ(plan.buffers[n - 1].region, -1);

    for (int a = 0; a < n; ++a) {
      const auto& ia = plan.buffers[a];
      if (ia.role != BufferRole::kTemp || last[a] < 0) continue;
      for (int b = a + 1; b < n; ++b) {
        const auto& ib = plan.buffers[b];
        if (ib.role != BufferRole::kTemp || last[b] < 0 || ia.region != ib.region) continue;
        const bool live_together = first[a] <= last[b] && first[b] <= last[a];
        const bool bytes_overlap = ia.offset < ib.offset + ib.bytes() && ib.offset < ia.offset + ia.bytes();
        EXPECT_FALSE(live_together && bytes_overlap)
            << ia.name << " [" << first[a] << "," << last[a] << "] +" << ia.offset << " and " << ib.name << " ["
            << first[b] << "," << last[b] << "] +" << ib.offset << " in region " << ia.region;
      }
    }
  }
  // The generator must exercise donation.
  EXPECT_GT(plans_with_donors, 50);
  EXPECT_GT(donated_temps, 100);
  EXPECT_GT(plans_with_output_regions, 10);  // and temps in outputs made early
}

// ---- views -----------------------------------------------------------------------

// %0 x, %1 t, %2 r temps, %3 v view of r, %4 vv view of v, %5 out.
//   0: t, r = f(x)   1: out = g(v)   2: out = h(vv, t)
TEST(PlanArenaViewTest, AViewIsNotPlacedAndTakesItsRootsPlace) {
  runtime::BufferPlan plan;
  plan.buffers = {Buffer("x", BufferRole::kInput, 64, 0),  Buffer("t", BufferRole::kTemp, 64),
                  Buffer("r", BufferRole::kTemp, 64),      ViewOf("v", 2, {8, 8}),
                  ViewOf("vv", 3, {4, 16}),                Buffer("out", BufferRole::kOutput, 64, 0)};
  const std::vector<runtime::Instruction> ins = {Ins({0}, {1, 2}), Ins({3}, {5}), Ins({4, 1}, {5})};
  runtime::PlanArena(ins, &plan, /*reuse=*/true);
  EXPECT_EQ(runtime::RootBuffer(plan, 4), 2);
  EXPECT_EQ(plan.buffers[1].offset, 0u);
  EXPECT_EQ(plan.buffers[2].offset, 256u) << "t and r are both live at 0";
  for (int v : {3, 4}) {
    EXPECT_EQ(plan.buffers[v].region, -1) << plan.buffers[v].name;
    EXPECT_EQ(plan.buffers[v].offset, 256u) << plan.buffers[v].name << " is r's memory";
  }
  EXPECT_EQ(plan.buffers[4].dims, (Dims{4, 16})) << "a view keeps its own dims";
  EXPECT_EQ(plan.arena_bytes, 512u);
  EXPECT_EQ(plan.arena_bytes_no_reuse, 512u) << "views take no bytes of their own";
}

// %0 x, %1 r, %2 v view of r, %3 a, %4 b, %5 out.
//   0: r = f(x)   1: a = g(r)   2: b = h(a)   3: out = k(v, b)
// r is last named at 1 but read through v at 3: b must not take its memory.
runtime::BufferPlan ViewReadLate(bool read_view, bool reuse) {
  runtime::BufferPlan plan;
  plan.buffers = {Buffer("x", BufferRole::kInput, 64, 0), Buffer("r", BufferRole::kTemp, 64),
                  ViewOf("v", 1, {8, 8}),                 Buffer("a", BufferRole::kTemp, 64),
                  Buffer("b", BufferRole::kTemp, 64),     Buffer("out", BufferRole::kOutput, 64, 0)};
  std::vector<runtime::Instruction> ins = {Ins({0}, {1}), Ins({1}, {3}), Ins({3}, {4}), Ins({2, 4}, {5})};
  if (!read_view) ins[3] = Ins({4}, {5});
  runtime::PlanArena(ins, &plan, reuse);
  return plan;
}

TEST(PlanArenaViewTest, ARootLivesWhileItsViewsAreRead) {
  {
    const runtime::BufferPlan plan = ViewReadLate(/*read_view=*/true, true);
    const auto& r = plan.buffers[1];
    const auto& b = plan.buffers[4];
    EXPECT_FALSE(r.offset < b.offset + b.bytes() && b.offset < r.offset + r.bytes())
        << "b (+" << b.offset << ") is written at 2 while v still reads r (+" << r.offset << ") at 3";
    EXPECT_EQ(plan.buffers[2].offset, r.offset);
    // a [1,2] ends before out is written (3): it lives in out's memory.
    EXPECT_EQ(plan.buffers[3].region, 5);
    EXPECT_EQ(plan.arena_bytes, 512u);
  }
  {
    // The same without the late read through v: r, a and b fit in two slots.
    const runtime::BufferPlan plan = ViewReadLate(/*read_view=*/false, true);
    EXPECT_LE(plan.arena_bytes, 512u);
  }
}

// A donatable input read through a view after its last direct read: no temp
// goes into it before the view's read, and it is freed after that read.
TEST(PlanArenaViewTest, ADonatableInputLivesWhileItsViewsAreRead) {
  //   0: a = f(x)   1: t = g(a)   2: out = h(xv, t)   (or out = h(t))
  for (bool read_view : {true, false}) {
    SCOPED_TRACE(read_view ? "x read through xv at 2" : "x not read after 0");
    runtime::BufferPlan plan;
    plan.buffers = {Buffer("x", BufferRole::kInput, 256, 0, true), ViewOf("xv", 0, {16, 16}),
                    Buffer("a", BufferRole::kTemp, 64), Buffer("t", BufferRole::kTemp, 64),
                    Buffer("out", BufferRole::kOutput, 64, 0)};
    std::vector<runtime::Instruction> ins = {Ins({0}, {2}), Ins({2}, {3}),
                                             read_view ? Ins({1, 3}, {4}) : Ins({3}, {4})};
    runtime::PlanArena(ins, &plan, true);
    EXPECT_EQ(plan.buffers[1].region, -1);
    EXPECT_EQ(plan.buffers[1].offset, 0u);
    EXPECT_EQ(plan.buffers[3].region, read_view ? -1 : 0) << "t is written at 1";
    EXPECT_EQ(plan.donors, read_view ? std::vector<int>{} : std::vector<int>{0});
    // x's memory is used last at 2 either way (through xv, or by t in it).
    EXPECT_EQ(plan.free_after, (std::vector<std::vector<int>>{{}, {}, {0}}));
  }
}

// A temp view of an output takes the output's memory (bound at run time, not
// in the arena), and the output is made before the view's first writer.
TEST(PlanArenaViewTest, ATempViewOfAnOutputIsNotInTheArena) {
  //   0: ov = f(x)   1: t = g(ov)   2: out2 = h(t)
  runtime::BufferPlan plan;
  plan.buffers = {Buffer("x", BufferRole::kInput, 64, 0), Buffer("out", BufferRole::kOutput, 64, 0),
                  ViewOf("ov", 1, {8, 8}),                Buffer("t", BufferRole::kTemp, 64),
                  Buffer("out2", BufferRole::kOutput, 64, 1)};
  const std::vector<runtime::Instruction> ins = {Ins({0}, {2}), Ins({2}, {3}), Ins({3}, {4})};
  runtime::PlanArena(ins, &plan, true);
  EXPECT_EQ(plan.buffers[2].region, -1);
  EXPECT_EQ(plan.buffers[2].offset, 0u);
  EXPECT_EQ(plan.buffers[3].offset, 0u) << "the arena holds t alone";
  EXPECT_EQ(plan.arena_bytes, 256u);
  EXPECT_EQ(plan.arena_bytes_no_reuse, 256u);
  EXPECT_EQ(plan.alloc_before, (std::vector<std::vector<int>>{{0}, {}, {1}}));
}

TEST(PlanArenaViewTest, WithoutReuseEveryRootHasItsOwnSlot) {
  const runtime::BufferPlan plan = ViewReadLate(/*read_view=*/false, /*reuse=*/false);
  EXPECT_EQ(plan.buffers[1].offset, 0u);
  EXPECT_EQ(plan.buffers[2].offset, 0u) << "v is r's memory";
  EXPECT_EQ(plan.buffers[3].offset, 256u);
  EXPECT_EQ(plan.buffers[4].offset, 512u) << "b does not take dead r's memory";
  EXPECT_EQ(plan.arena_bytes, 768u);
  EXPECT_EQ(plan.arena_bytes_no_reuse, 768u);
}

}  // namespace
}  // namespace kiln
