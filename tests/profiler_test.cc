// runtime/profiler.cc: calls counted per kernel (name and description), the
// report's rows slowest first with their call counts, Reset.
#include "runtime/profiler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kiln {
namespace {

// A kernel that sleeps `ms` milliseconds and counts its runs.
class SleepKernel : public runtime::Kernel {
 public:
  SleepKernel(std::string name, int ms) : name_(std::move(name)), ms_(ms) {}
  const std::string& name() const override { return name_; }
  std::string Describe() const override { return "sleeps " + std::to_string(ms_) + " ms"; }
  void Run(const runtime::BufferView*) const override {
    ++runs;
    if (ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
  }
  mutable std::atomic<int> runs{0};

 private:
  std::string name_;
  int ms_;
};

// The calls column of the report row that ends with `what`.
int64_t CallsInRow(const std::string& report, const std::string& what) {
  const size_t at = report.find("  " + what + "\n");
  if (at == std::string::npos) return -1;
  const size_t line = report.rfind('\n', at) + 1;
  std::istringstream fields(report.substr(line, at - line));
  double ms = 0, share = 0;
  std::string percent;
  int64_t calls = -1;
  fields >> ms >> share >> percent >> calls;
  return calls;
}

TEST(ProfilerTest, CountsCallsPerKernelAndReportsTheSlowestFirst) {
  // The slow kernel sleeps far longer than the other takes to return: the
  // order of the rows does not depend on the machine's speed.
  const SleepKernel slow("slow", 30), quick("quick", 0), twin("quick", 0);
  runtime::Profiler profiler;
  EXPECT_EQ(profiler.calls(), 0);
  for (int i = 0; i < 3; ++i) profiler.RunTimed(quick, nullptr);
  profiler.RunTimed(slow, nullptr);
  profiler.RunTimed(twin, nullptr);  // same name and description: the same row
  EXPECT_EQ(quick.runs.load(), 3);
  EXPECT_EQ(slow.runs.load(), 1);
  EXPECT_EQ(profiler.calls(), 5);
  const std::string report = profiler.Report();
  EXPECT_EQ(report.rfind("jit profile: ", 0), 0u) << report;
  const size_t slow_row = report.find("slow  sleeps 30 ms\n");
  const size_t quick_row = report.find("quick  sleeps 0 ms\n");
  ASSERT_NE(slow_row, std::string::npos) << report;
  ASSERT_NE(quick_row, std::string::npos) << report;
  EXPECT_LT(slow_row, quick_row) << report;
  EXPECT_EQ(CallsInRow(report, "slow  sleeps 30 ms"), 1) << report;
  EXPECT_EQ(CallsInRow(report, "quick  sleeps 0 ms"), 4) << report;

  profiler.Reset();
  EXPECT_EQ(profiler.calls(), 0);
  EXPECT_EQ(profiler.Report().find("sleeps"), std::string::npos);
  profiler.RunTimed(quick, nullptr);
  EXPECT_EQ(CallsInRow(profiler.Report(), "quick  sleeps 0 ms"), 1);
}

TEST(ProfilerTest, ThreadsRecordIntoOneProfiler) {
  const SleepKernel a("a", 0), b("b", 0);
  runtime::Profiler profiler;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 250; ++i) profiler.RunTimed(t % 2 ? a : b, nullptr);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(profiler.calls(), 1000);
  EXPECT_EQ(CallsInRow(profiler.Report(), "a  sleeps 0 ms"), 500);
  EXPECT_EQ(CallsInRow(profiler.Report(), "b  sleeps 0 ms"), 500);
}

}  // namespace
}  // namespace kiln
