#include "runtime/profiler.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <sstream>
#include <vector>

namespace kiln::runtime {

void Profiler::RunTimed(const Kernel& kernel, const BufferView* args, void* scratch) {
  const auto t0 = std::chrono::steady_clock::now();
  kernel.RunWithScratch(args, scratch);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(mu_);
  Row& r = rows_[kernel.name() + "  " + kernel.Describe()];
  ++r.calls;
  r.ms += ms;
}

void Profiler::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  rows_.clear();
}

int64_t Profiler::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [what, r] : rows_) n += r.calls;
  return n;
}

std::vector<Profiler::Entry> Profiler::Entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out;
  for (const auto& [what, r] : rows_) out.push_back({what, r.calls, r.ms});
  std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.ms > b.ms; });
  return out;
}

std::string Profiler::Report() const {
  const std::vector<Entry> rows = Entries();
  double total = 0;
  for (const auto& r : rows) total += r.ms;
  std::ostringstream os;
  os << "jit profile: " << std::fixed << std::setprecision(3) << total << " ms in compiled instructions\n";
  os << "      ms   share    calls  us/call  kernel\n";
  for (const Entry& e : rows) {
    os << std::setw(8) << e.ms << std::setw(7) << std::setprecision(1) << (total > 0 ? 100 * e.ms / total : 0)
       << "%" << std::setw(9) << e.calls << std::setw(9) << std::setprecision(1) << 1000 * e.ms / e.calls << "  "
       << e.kernel << "\n"
       << std::setprecision(3);
  }
  return os.str();
}

}  // namespace kiln::runtime
