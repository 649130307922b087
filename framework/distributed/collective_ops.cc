// Collective ops for data-parallel training (framework/distributed/
// data_parallel.h inserts them): gradients averaged over the ranks of the
// job, in place.
//   c_allreduce_avg:   X... -> Out... (the same vars), blocking
//   c_allreduce_start: X... -> Handle; packs X into the buffer of bucket
//                      `bucket` and starts averaging it on the communication
//                      thread (the ops after it run meanwhile)
//   c_allreduce_wait:  X..., Handle -> Out... (the same vars as X); waits for
//                      bucket `bucket` (at most --dp_timeout_s) and unpacks it
// None is clustered by the JIT, and no cluster spans across one.
#include <cstring>
#include <map>
#include <mutex>

#include "framework/distributed/communicator.h"
#include "framework/op_registry.h"
#include "framework/ops/ops.h"

namespace kiln {
namespace {

using distributed::Communicator;

// A bucket's packed values while its allreduce runs.
struct Bucket {
  std::vector<float> buffer;
  std::shared_future<void> done;
  bool pending = false;
};

std::map<std::string, Bucket>& Buckets() {
  static auto* buckets = new std::map<std::string, Bucket>();
  return *buckets;
}
std::mutex& BucketsMutex() {
  static std::mutex mu;
  return mu;
}

void CheckFloats(const ExecContext& ctx, const std::vector<const Tensor*>& xs) {
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i]->dtype() != DataType::kFP32) {
      ctx.Fail("input X[", i, "] ('", ctx.InputName("X", i), "'): expected f32, got ", xs[i]->ShapeString());
    }
  }
}

int64_t TotalNumel(const std::vector<const Tensor*>& xs) {
  int64_t n = 0;
  for (const Tensor* x : xs) n += x->numel();
  return n;
}

void Pack(const std::vector<const Tensor*>& xs, std::vector<float>* buffer) {
  buffer->resize(static_cast<size_t>(TotalNumel(xs)));
  float* dst = buffer->data();
  for (const Tensor* x : xs) {
    std::memcpy(dst, x->data<float>(), x->bytes());
    dst += x->numel();
  }
}

// Writes the bucket's sums over the ranks, divided by the rank count, to
// Out: the average in the pass that copies them out anyway.
void UnpackAverage(ExecContext& ctx, const std::vector<float>& sums) {
  const float inv = 1.0f / static_cast<float>(Communicator::Global().size());
  const float* src = sums.data();
  for (size_t i = 0; i < ctx.OutputCount("Out"); ++i) {
    Tensor* out = ctx.Output("Out", i);
    float* dst = out->mutable_data<float>();
    const int64_t n = out->numel();
    for (int64_t j = 0; j < n; ++j) dst[j] = src[j] * inv;
    src += n;
  }
}

void SameDimsInferShape(InferShapeContext& ctx) {
  if (ctx.OutputCount("Out") != 0 && ctx.OutputCount("Out") != ctx.InputCount("X")) {
    ctx.Fail("Out has ", ctx.OutputCount("Out"), " vars, X has ", ctx.InputCount("X"));
  }
  for (size_t i = 0; i < ctx.InputCount("X"); ++i) {
    if (ctx.InputDtype("X", i) != DataType::kFP32) {
      ctx.Fail("input X[", i, "]: expected f32, got ", DataTypeName(ctx.InputDtype("X", i)));
    }
    if (ctx.OutputCount("Out") != 0) ctx.SetOutput("Out", ctx.InputDims("X", i), DataType::kFP32, i);
  }
  if (ctx.HasOutput("Handle")) ctx.SetOutput("Handle", {1}, DataType::kINT64);
}

OpInfo Collective(const std::string& type, const std::string& doc) {
  OpInfo op;
  op.type = type;
  op.doc = doc;
  op.infer_shape = SameDimsInferShape;
  op.jit = JitLowering::kNone;
  op.cluster_boundary = true;
  return op;
}

}  // namespace

void RegisterCollectiveOps(OpRegistry& r) {
  OpInfo avg = Collective("c_allreduce_avg",
                          "Out[i] = X[i] averaged over the ranks of a data-parallel job (blocking; in place)");
  avg.inputs = {{"X", true}};
  avg.outputs = {{"Out", true}};
  avg.inplace = {{"X", "Out"}};
  avg.reference_kernel = [](ExecContext& ctx) {
    const std::vector<const Tensor*> xs = ctx.MultiInput("X");
    CheckFloats(ctx, xs);
    std::vector<float> buffer;
    Pack(xs, &buffer);
    Communicator& comm = Communicator::Global();
    comm.Wait(comm.AllreduceSumAsync(buffer.data(), static_cast<int64_t>(buffer.size())),
              "the average of " + ctx.OpName());
    UnpackAverage(ctx, buffer);
  };
  r.Add(std::move(avg));

  OpInfo start = Collective("c_allreduce_start",
                            "Starts averaging X over the ranks (bucket `bucket`); c_allreduce_wait ends it");
  start.inputs = {{"X", true}};
  start.outputs = {{"Handle"}};
  start.attrs = {{"bucket", AttrKind::kString, std::nullopt}};
  start.reference_kernel = [](ExecContext& ctx) {
    const std::vector<const Tensor*> xs = ctx.MultiInput("X");
    CheckFloats(ctx, xs);
    const std::string& name = ctx.Attr<std::string>("bucket");
    std::lock_guard<std::mutex> lock(BucketsMutex());
    Bucket& b = Buckets()[name];
    if (b.pending) ctx.Fail("bucket '", name, "' started again before its c_allreduce_wait");
    Pack(xs, &b.buffer);
    b.done = Communicator::Global().AllreduceSumAsync(b.buffer.data(), static_cast<int64_t>(b.buffer.size()));
    b.pending = true;
    ctx.Output("Handle")->mutable_data<int64_t>()[0] = static_cast<int64_t>(b.buffer.size());
  };
  r.Add(std::move(start));

  OpInfo wait = Collective("c_allreduce_wait",
                           "Waits for bucket `bucket` and writes X averaged over the ranks to Out (in place)");
  wait.inputs = {{"X", true}, {"Handle"}};
  wait.outputs = {{"Out", true}};
  wait.attrs = {{"bucket", AttrKind::kString, std::nullopt}};
  wait.inplace = {{"X", "Out"}};
  wait.no_need_buffer = {"X"};
  wait.reference_kernel = [](ExecContext& ctx) {
    const std::string& name = ctx.Attr<std::string>("bucket");
    Bucket* b = nullptr;
    {
      std::lock_guard<std::mutex> lock(BucketsMutex());
      auto it = Buckets().find(name);
      if (it == Buckets().end() || !it->second.pending) ctx.Fail("bucket '", name, "' was not started");
      b = &it->second;
    }
    Communicator::Global().Wait(b->done, "gradient bucket '" + name + "' (" + ctx.OpName() + ")",
                                /*gradients=*/true);
    UnpackAverage(ctx, b->buffer);
    std::lock_guard<std::mutex> lock(BucketsMutex());
    b->pending = false;
  };
  r.Add(std::move(wait));
}

}  // namespace kiln
