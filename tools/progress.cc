#include "tools/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace kiln::tools {

ProgressBar::ProgressBar(std::string label, int64_t total, bool enabled, double delay_s, int64_t offset)
    : label_(std::move(label)),
      total_(std::max<int64_t>(1, total)),
      offset_(offset),
      enabled_(enabled && ::isatty(STDERR_FILENO)),
      delay_s_(delay_s),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { Finish(); }

std::string ProgressBar::Eta(int64_t done, int64_t total, double elapsed_s) {
  if (done <= 0) return "-";
  const auto left = static_cast<int64_t>(elapsed_s * static_cast<double>(total - done) / static_cast<double>(done) + 0.5);
  char buf[32];
  if (left >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(left / 3600),
                  static_cast<long long>(left / 60 % 60), static_cast<long long>(left % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(left / 60), static_cast<long long>(left % 60));
  }
  return buf;
}

void ProgressBar::Update(int64_t done, const std::string& detail) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (elapsed < delay_s_) return;
  // At most ~20 redraws a second, and always the last one.
  if (drawn_ && done < total_ && now - last_draw_ < std::chrono::milliseconds(50)) return;
  last_draw_ = now;
  drawn_ = true;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * std::min(done, total_) / total_);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  std::fprintf(stderr, "\r%s [%s] %lld/%lld  ETA %s  %s\033[K", label_.c_str(), bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), Eta(done - offset_, total_ - offset_, elapsed).c_str(),
               detail.c_str());
  std::fflush(stderr);
}

void ProgressBar::Finish() {
  if (!drawn_) return;
  std::fputc('\n', stderr);
  drawn_ = false;
}

}  // namespace kiln::tools
