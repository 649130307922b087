#include "tools/data_parallel_setup.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "framework/distributed/communicator.h"
#include "framework/flags.h"
#include "framework/hash.h"

namespace kiln::tools {
namespace {

// A checksum of a tensor's bytes (framework/hash.h's combine over 8-byte words).
uint64_t HashBytes(const Tensor& t) {
  size_t h = 0x6b696c6e;
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  size_t i = 0;
  for (; i + 8 <= t.bytes(); i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    HashCombine(h, w);
  }
  for (; i < t.bytes(); ++i) HashCombine(h, p[i]);
  return h;
}

}  // namespace

void CheckParametersAgree(const Model& model, const Scope& scope, int64_t step) {
  distributed::Communicator& comm = distributed::Communicator::Global();
  std::vector<uint64_t> hashes;
  size_t all = 0;
  for (const std::string& p : model.params) {
    hashes.push_back(HashBytes(scope.GetVar(p)->Get()));
    HashCombine(all, hashes.back());
  }
  const std::vector<uint64_t> ranks = comm.Allgather(all, "the parameter checksums of step " + std::to_string(step));
  if (std::all_of(ranks.begin(), ranks.end(), [all](uint64_t h) { return h == all; })) return;
  // Some parameter differs: find the first, by name, each rank taking part.
  for (size_t i = 0; i < model.params.size(); ++i) {
    const std::vector<uint64_t> per_rank = comm.Allgather(hashes[i], "the checksum of " + model.params[i]);
    for (size_t r = 1; r < per_rank.size(); ++r) {
      if (per_rank[r] == per_rank[0]) continue;
      ThrowInvalidArgument("data parallel: after step ", step, " parameter '", model.params[i], "' differs between rank 0 and rank ",
                           r, " (--dp_check_every ", FLAGS_dp_check_every, ")");
    }
  }
}

void PrintDataParallelLine(int64_t steps) {
  const distributed::Communicator& comm = distributed::Communicator::Global();
  const distributed::Communicator::Stats s = comm.stats();
  const double n = static_cast<double>(std::max<int64_t>(1, steps));
  const double hidden = s.comm_ms > 0 ? std::max(0.0, 1.0 - s.waited_ms / s.comm_ms) : 0.0;
  std::printf("data parallel: %d ranks; %.1f gradient averages of %.1f KiB a step, %.3f ms of communication a step, "
              "%.3f ms of it waited for: %.0f%% hidden behind the backward pass\n",
              comm.size(), static_cast<double>(s.averages) / n, static_cast<double>(s.bytes) / n / 1024.0,
              s.comm_ms / n, s.waited_ms / n, 100.0 * hidden);
}

DataParallelSetup SetUpDataParallel(Model* model, TrainOptions* options) {
  DataParallelSetup s;
  if (!FLAGS_data_parallel) return s;
  if (!(FLAGS_dp_timeout_s > 0)) ThrowInvalidArgument("--dp_timeout_s must be > 0, got ", FLAGS_dp_timeout_s);
  if (!(FLAGS_dp_bucket_mb > 0)) ThrowInvalidArgument("--dp_bucket_mb must be > 0, got ", FLAGS_dp_bucket_mb);
  if (FLAGS_dp_check_every < 0) ThrowInvalidArgument("--dp_check_every must be >= 0, got ", FLAGS_dp_check_every);
  distributed::Communicator& comm = distributed::Communicator::Global();
  comm.set_timeout_seconds(FLAGS_dp_timeout_s);
  comm.Init();
  s.on = true;
  s.rank = comm.rank();
  s.size = comm.size();
  if (options->batch_size % s.size != 0) {
    ThrowInvalidArgument("--data_parallel: --batch_size ", options->batch_size, " (the global batch) is not a multiple of the ",
                         s.size, " ranks");
  }
  DataParallelOptions dpo;
  dpo.bucket_bytes = static_cast<int64_t>(FLAGS_dp_bucket_mb * (1 << 20));
  s.report = AppendDataParallel(&model->train, dpo);
  DataParallelTraining& dp = options->data_parallel;
  dp.rank = s.rank;
  dp.size = s.size;
  dp.average_loss = [&comm, size = s.size](float loss) {
    return static_cast<float>(comm.AllreduceSum(loss, "the step's loss") / size);
  };
  dp.check_every = FLAGS_dp_check_every;
  const Model* m = model;
  dp.check = [m](const Scope& scope, int64_t step) { CheckParametersAgree(*m, scope, step); };
  return s;
}

}  // namespace kiln::tools
