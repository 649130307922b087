#include "framework/trace.h"

#include <nlohmann/json.hpp>

#include <thread>

namespace kiln {

Tracer& Tracer::Global() {
  static Tracer* t = new Tracer();
  return *t;
}

Tracer::Tracer() : epoch_(std::chrono::steady_clock::now()) {}

void Tracer::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  events_.clear();
  on_.store(true);
}

void Tracer::Stop() { on_.store(false); }

double Tracer::NowUs() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - epoch_).count();
}

int Tracer::ThreadIndex() {
  auto [it, added] = threads_.emplace(std::this_thread::get_id(), static_cast<int>(threads_.size()) + 1);
  return it->second;
}

void Tracer::Complete(std::string name, std::string cat, double start_us, double dur_us,
                      std::map<std::string, std::string> args) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({std::move(name), std::move(cat), start_us, dur_us, ThreadIndex(), std::move(args)});
}

size_t Tracer::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

std::string Tracer::ToJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  std::map<int, bool> tids;
  for (const Event& e : events_) tids[e.tid] = true;
  for (const auto& [tid, unused] : tids) {
    (void)unused;
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", tid},
                      {"args", {{"name", tid == 1 ? std::string("main") : "thread " + std::to_string(tid)}}}});
  }
  for (const Event& e : events_) {
    nlohmann::ordered_json j = {{"name", e.name}, {"cat", e.cat}, {"ph", "X"}, {"ts", e.ts},
                                {"dur", e.dur},   {"pid", 1},     {"tid", e.tid}};
    if (!e.args.empty()) j["args"] = e.args;
    events.push_back(std::move(j));
  }
  nlohmann::ordered_json out;
  out["traceEvents"] = std::move(events);
  out["displayTimeUnit"] = "ms";
  return out.dump() + "\n";
}

}  // namespace kiln
