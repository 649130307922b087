// --data_parallel at the tool edge: the communicator (MPI), the program
// transform (framework/distributed/data_parallel.h) and the trainer's hooks
// (loss averaged over the ranks, parameters compared every
// --dp_check_every steps).
#pragma once

#include "framework/distributed/data_parallel.h"
#include "framework/models/models.h"
#include "framework/trainer.h"

namespace kiln::tools {

struct DataParallelSetup {
  bool on = false;
  int rank = 0;
  int size = 1;
  DataParallelReport report;
};

// Without --data_parallel: {off, rank 0 of 1}, nothing changed. With it:
// initialises the communicator (--dp_timeout_s), checks that --batch_size
// (the global batch) is a multiple of the ranks, rewrites model->train to
// average every gradient in buckets of --dp_bucket_mb and fills
// options->data_parallel.
DataParallelSetup SetUpDataParallel(Model* model, TrainOptions* options);

// "data parallel: ..." on stdout: the gradient averages per step, their
// communication time and how much of it the backward pass hid.
void PrintDataParallelLine(int64_t steps);

// Throws InvalidArgument naming the first parameter (by name) whose bytes
// differ between the ranks at `step`.
void CheckParametersAgree(const Model& model, const Scope& scope, int64_t step);

}  // namespace kiln::tools
