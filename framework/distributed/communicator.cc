#include "framework/distributed/communicator.h"

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include "framework/error.h"

namespace kiln::distributed {

// The communication thread: runs queued tasks one at a time, in order.
struct Communicator::Worker {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::packaged_task<void()>> tasks;
  bool stop = false;
  std::thread thread;

  Worker() : thread([this] { Loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_one();
    thread.join();
  }
  void Loop() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [this] { return stop || !tasks.empty(); });
        if (tasks.empty()) return;
        task = std::move(tasks.front());
        tasks.pop_front();
      }
      task();
    }
  }
};

Communicator& Communicator::Global() {
  static Communicator* c = [] {
    auto* comm = new Communicator();
    std::atexit([] { Global().Shutdown(); });
    return comm;
  }();
  return *c;
}

void Communicator::Init() {
  if (worker_) return;
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    we_initialized_mpi_ = true;
    // The communication thread makes the calls while the main thread may
    // abort: both need MPI from more than one thread.
    if (provided < MPI_THREAD_MULTIPLE) {
      ThrowInvalidArgument("data parallel: MPI gives thread support level ", provided,
                           ", the communication thread needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")");
    }
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  worker_ = std::make_unique<Worker>();
}

bool Communicator::initialized() const { return worker_ != nullptr; }

void Communicator::Shutdown() {
  if (!worker_) return;
  worker_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (we_initialized_mpi_ && !finalized) MPI_Finalize();
}

Communicator::~Communicator() = default;

std::shared_future<void> Communicator::Enqueue(std::function<void()> task) {
  KILN_CHECK(worker_ != nullptr, "Communicator used before Init");
  std::packaged_task<void()> t(std::move(task));
  std::shared_future<void> f = t.get_future().share();
  {
    std::lock_guard<std::mutex> lock(worker_->mu);
    worker_->tasks.push_back(std::move(t));
  }
  worker_->cv.notify_one();
  return f;
}

std::shared_future<void> Communicator::AllreduceSumAsync(float* data, int64_t count) {
  if (size_ == 1 || count == 0) {
    std::promise<void> done;
    done.set_value();
    return done.get_future().share();
  }
  return Enqueue([this, data, count] {
    const auto t0 = std::chrono::steady_clock::now();
    // MPI counts are ints: reduce in chunks below 2^31 elements.
    constexpr int64_t kChunk = int64_t{1} << 30;
    for (int64_t off = 0; off < count; off += kChunk) {
      const int len = static_cast<int>(std::min(kChunk, count - off));
      MPI_Allreduce(MPI_IN_PLACE, data + off, len, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.averages;
    stats_.bytes += count * static_cast<int64_t>(sizeof(float));
    stats_.comm_ms += ms;
  });
}

Communicator::Stats Communicator::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void Communicator::ResetStats() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_ = Stats{};
}

void Communicator::Wait(const std::shared_future<void>& f, const std::string& what, bool gradients) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto timeout = std::chrono::duration<double>(timeout_s_);
  if (f.wait_for(timeout) != std::future_status::ready) {
    Abort("data parallel: rank " + std::to_string(rank_) + " waited " + std::to_string(static_cast<int>(timeout_s_)) +
          " s for " + what + " (--dp_timeout_s): another rank died or hangs; aborting the job");
  }
  f.get();  // rethrows what the task threw
  if (!gradients) return;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.waited_ms += ms;
}

double Communicator::AllreduceSum(double value, const std::string& what) {
  if (size_ == 1) return value;
  double result = value;
  Wait(Enqueue([&result] { MPI_Allreduce(MPI_IN_PLACE, &result, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); }), what);
  return result;
}

std::vector<uint64_t> Communicator::Allgather(uint64_t value, const std::string& what) {
  std::vector<uint64_t> all(static_cast<size_t>(size_), value);
  if (size_ == 1) return all;
  Wait(Enqueue([&all, value] {
         MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
       }),
       what);
  return all;
}

void Communicator::Abort(const std::string& message) const {
  std::fprintf(stderr, "kiln: %s\n", message.c_str());
  std::fflush(stderr);
  if (worker_) MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);  // MPI_Abort does not return; in case it does
}

}  // namespace kiln::distributed
