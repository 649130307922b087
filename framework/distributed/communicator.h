// The communicator of data-parallel training: MPI (OpenMPI from Debian) with
// one communication thread. Collectives are queued to that thread and run
// there one at a time, in the order every rank queues them, so they overlap
// with whatever the caller computes meanwhile (the rest of the backward
// pass); the caller waits on a future with a timeout. A rank that died or
// hangs makes the wait time out: the job is then aborted (MPI_Abort) with a
// message naming what was waited for, so no job hangs forever.
//
// Without `mpirun` (or before Init) the world is one process: every
// collective is the identity and rank() is 0.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::distributed {

class Communicator {
 public:
  // The process's communicator.
  static Communicator& Global();

  // MPI_Init_thread (MPI_THREAD_MULTIPLE) and the communication thread.
  // Idempotent. Throws InvalidArgument when MPI cannot give the thread
  // support the communication thread needs.
  void Init();
  // Joins the communication thread, then MPI_Finalize. Idempotent; also run
  // at exit.
  void Shutdown();
  bool initialized() const;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // How long a wait may take before the job is aborted (--dp_timeout_s).
  void set_timeout_seconds(double s) { timeout_s_ = s; }
  double timeout_seconds() const { return timeout_s_; }

  // Sums `count` floats at `data` over the ranks, in place, on the
  // communication thread; the caller divides by size() where it reads the
  // sums anyway (a bucket's unpack), which saves the thread a pass over
  // them. `data` must stay valid until the future is ready.
  std::shared_future<void> AllreduceSumAsync(float* data, int64_t count);
  // Waits for `f` at most timeout_seconds(); on timeout prints which rank
  // waited for `what` and aborts the job (never returns then).
  // `gradients`: count the blocked time in stats().waited_ms.
  void Wait(const std::shared_future<void>& f, const std::string& what, bool gradients = false);

  // Blocking collectives (queued like the others, waited with the timeout).
  double AllreduceSum(double value, const std::string& what);
  // Every rank's `value`, by rank.
  std::vector<uint64_t> Allgather(uint64_t value, const std::string& what);

  // What the gradient averages cost: time the communication thread spent in
  // them, and time callers spent blocked waiting for them (Wait with
  // `gradients`); the difference was hidden behind the caller's work.
  struct Stats {
    int64_t averages = 0;
    int64_t bytes = 0;
    double comm_ms = 0;
    double waited_ms = 0;
  };
  Stats stats() const;
  void ResetStats();

  // Aborts every rank of the job with `message` on this rank's stderr.
  [[noreturn]] void Abort(const std::string& message) const;

  ~Communicator();

 private:
  Communicator() = default;
  std::shared_future<void> Enqueue(std::function<void()> task);

  struct Worker;
  std::unique_ptr<Worker> worker_;
  mutable std::mutex stats_mu_;
  Stats stats_;
  int rank_ = 0;
  int size_ = 1;
  double timeout_s_ = 300.0;
  bool we_initialized_mpi_ = false;
};

}  // namespace kiln::distributed
