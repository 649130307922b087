// A progress bar on stderr for the commands that run long: kiln train (per
// epoch, with the step of the whole run and an ETA), kiln run --steps N and
// kiln bench. On a terminal it redraws one line; piped, it stays silent
// (kiln train prints a plain line per epoch instead, as before).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace kiln::tools {

class ProgressBar {
 public:
  // `total` units of work. With `delay_s` > 0 the bar appears only once the
  // work has run that long (short runs print nothing). `enabled` false (or
  // stderr not a terminal) turns it off.
  // `offset` units were done before the bar started (a resumed run): they
  // count in done/total but not in the rate behind the ETA.
  ProgressBar(std::string label, int64_t total, bool enabled, double delay_s = 0.0, int64_t offset = 0);
  ~ProgressBar();
  // `done` units finished; `detail` follows the bar ("loss 0.4213").
  void Update(int64_t done, const std::string& detail = "");
  void set_label(std::string label) { label_ = std::move(label); }
  // Ends the line if the bar was drawn.
  void Finish();

  // "0:07", "1:02:03": the estimated time left when `done` of `total` took
  // `elapsed_s` (an em dash while nothing is done).
  static std::string Eta(int64_t done, int64_t total, double elapsed_s);

 private:
  std::string label_;
  int64_t total_;
  int64_t offset_;
  bool enabled_;
  double delay_s_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace kiln::tools
