// A step trace in the Chrome trace event format (what chrome://tracing and
// Perfetto open): complete events ("ph": "X") with a start, a duration, the
// thread and arguments. kiln train --trace and kiln run --trace turn it on
// for a few steps; the executor records one span per op, the runtime one per
// compiled kernel, the JIT compiler one per compile.
//
// Off (the default) it costs one relaxed atomic load per op.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kiln {

class Tracer {
 public:
  static Tracer& Global();

  bool on() const { return on_.load(std::memory_order_relaxed); }
  void Start();  // clears what was recorded
  void Stop();

  // Microseconds since the tracer was made (the trace's clock).
  double NowUs() const;
  // A span of `name` in category `cat` from start_us for dur_us on the
  // calling thread; `args` are string key/values shown in the viewer.
  void Complete(std::string name, std::string cat, double start_us, double dur_us,
                std::map<std::string, std::string> args = {});

  // {"traceEvents": [...], "displayTimeUnit": "ms"} with thread-name
  // metadata; deterministic in event order.
  std::string ToJson() const;
  size_t size() const;

 private:
  Tracer();
  struct Event {
    std::string name, cat;
    double ts = 0, dur = 0;
    int tid = 0;
    std::map<std::string, std::string> args;
  };
  int ThreadIndex();

  std::atomic<bool> on_{false};
  std::chrono::steady_clock::time_point epoch_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::map<std::thread::id, int> threads_;
};

// Records the span of its own lifetime when the tracer is on.
class TraceSpan {
 public:
  TraceSpan(const char* cat, std::string name) : on_(Tracer::Global().on()) {
    if (!on_) return;
    cat_ = cat;
    name_ = std::move(name);
    start_ = Tracer::Global().NowUs();
  }
  void Arg(const std::string& key, std::string value) {
    if (on_) args_[key] = std::move(value);
  }
  ~TraceSpan() {
    if (on_) Tracer::Global().Complete(name_, cat_, start_, Tracer::Global().NowUs() - start_, std::move(args_));
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  bool on_;
  const char* cat_ = "";
  std::string name_;
  double start_ = 0;
  std::map<std::string, std::string> args_;
};

}  // namespace kiln
