// Data parallelism as a program transform (like append_backward): every
// gradient an optimizer op reads is averaged over the ranks before the
// update. Gradients go in buckets of about `bucket_bytes`, in the order the
// backward pass finishes them; each bucket's c_allreduce_start sits right
// after the op that finishes its last gradient, and its c_allreduce_wait
// right before the first op after that which reads one of them (the
// optimizer updates). The communication of a bucket thus overlaps with the
// rest of the backward pass (build_jit_pass keeps clusters from spanning
// the collectives).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/proto/framework.pb.h"

namespace kiln {

struct DataParallelOptions {
  int64_t bucket_bytes = 25 << 20;  // --dp_bucket_mb
};

struct DataParallelReport {
  struct Bucket {
    std::string name;                // the ops' `bucket` attribute: "dp_bucket_0", ...
    std::vector<std::string> grads;  // in the order they are packed
    int64_t bytes = 0;
    int start_after = -1;            // index (in the transformed program) of the op before the start
  };
  std::vector<Bucket> buckets;
  std::string ToString() const;  // one line per bucket
};

// Throws InvalidArgument when the program has no optimizer op reading a
// gradient, or already holds collective ops.
DataParallelReport AppendDataParallel(proto::ProgramDesc* program, const DataParallelOptions& options = {});

}  // namespace kiln
