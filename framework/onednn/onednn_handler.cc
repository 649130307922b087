#include "framework/onednn/onednn_handler.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <omp.h>

#include "framework/shape_util.h"

namespace kiln::onednn {

dnnl::memory::dims ToDnnlDims(const Dims& dims) { return dnnl::memory::dims(dims.begin(), dims.end()); }

dnnl::memory::desc PlainDesc(const Dims& dims, dnnl::memory::data_type type) {
  const std::vector<int64_t> strides = Strides(dims);
  return dnnl::memory::desc(ToDnnlDims(dims), type,
                            dnnl::memory::dims(strides.begin(), strides.end()));
}

dnnl::memory::desc TransposedLastTwoDesc(const Dims& dims, dnnl::memory::data_type type) {
  KILN_CHECK(dims.size() >= 2);
  Dims stored = dims;
  const size_t r = dims.size();
  std::swap(stored[r - 1], stored[r - 2]);
  std::vector<int64_t> strides = Strides(stored);
  std::swap(strides[r - 1], strides[r - 2]);
  return dnnl::memory::desc(ToDnnlDims(dims), type,
                            dnnl::memory::dims(strides.begin(), strides.end()));
}

bool IsSlowImplementation(const std::string& impl) {
  for (const char* prefix : {"ref:", "simple_nchw:"}) {
    if (impl.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

int IsaRank(const std::string& impl) {
  static const std::vector<std::pair<const char*, int>> kIsas = {
      {"avx512_core_amx", 6}, {"avx512_core_bf16", 5}, {"avx512_core", 4}, {"avx512", 3},
      {"avx2", 2},            {"avx", 1},              {"sse41", 1}};
  if (IsSlowImplementation(impl)) return -1;
  if (impl.find("gemm") != std::string::npos) return 0;
  for (const auto& [name, rank] : kIsas) {
    if (impl.find(name) != std::string::npos) return rank;
  }
  return 0;
}

namespace {
// One OpenMP thread for the calling thread while it lives, when `one_thread`
// (deterministic mode): oneDNN sizes its work split by omp_get_max_threads()
// when it creates a primitive and runs it with that many threads. The
// setting is the calling thread's own, so other threads are not affected.
class DeterministicThreads {
 public:
  explicit DeterministicThreads(bool one_thread) : saved_(one_thread ? omp_get_max_threads() : 0) {
    if (saved_ > 1) omp_set_num_threads(1);
  }
  ~DeterministicThreads() {
    if (saved_ > 1) omp_set_num_threads(saved_);
  }
  DeterministicThreads(const DeterministicThreads&) = delete;
  DeterministicThreads& operator=(const DeterministicThreads&) = delete;

 private:
  int saved_;
};

}  // namespace

bool AllFp32(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t == nullptr || t->dtype() != DataType::kFP32 || t->numel() == 0) return false;
  }
  return true;
}

// ---- Engine, stream, scratchpad ----------------------------------------------------

const dnnl::engine& OneDnnHandler::Engine() {
  // Leaked: thread-local streams created on it may be destroyed after static
  // destructors run.
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

dnnl::stream& OneDnnHandler::ThreadStream() {
  thread_local dnnl::stream stream(Engine());
  return stream;
}

dnnl::primitive_attr OneDnnHandler::DefaultAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// ---- Primitives ------------------------------------------------------------------------

PrimitiveEntry OneDnnHandler::CreateForward() const {
  KILN_CHECK(false, "handler has no forward primitive for ", fwd_key_.ToString());
  return {};
}

PrimitiveEntry OneDnnHandler::CreateBackward() const {
  KILN_CHECK(false, "handler has no backward primitive for ", bwd_key_.ToString());
  return {};
}

bool OneDnnHandler::AcquireForwardPrimitive() { return Acquire(fwd_key_, /*forward=*/true); }
bool OneDnnHandler::AcquireBackwardPrimitive() { return Acquire(bwd_key_, /*forward=*/false); }

bool OneDnnHandler::Acquire(const PrimitiveKey& handler_key, bool forward) {
  PrimitiveKey key = handler_key;
  key.threads = settings_.deterministic ? 1 : 0;
  entry_ = cache_.GetOrCreate(key, [&]() {
    DeterministicThreads threads(key.threads == 1);
    auto created = std::make_shared<PrimitiveEntry>();
    try {
      *created = forward ? CreateForward() : CreateBackward();
    } catch (const dnnl::error&) {
      // No implementation for this case: remember the answer (an entry
      // without primitive) so later calls do not retry the creation.
      *created = PrimitiveEntry{};
      return std::shared_ptr<const PrimitiveEntry>(std::move(created));
    }
    created->threads = key.threads;
    created->impl = created->pd.impl_info_str();
    created->slow_impl = IsSlowImplementation(created->impl);
    for (const auto& pd : created->aux_pds) created->slow_impl |= IsSlowImplementation(pd.impl_info_str());
    return std::shared_ptr<const PrimitiveEntry>(std::move(created));
  });
  acquired_.clear();
  return entry_->primitive && (!entry_->slow_impl || settings_.allow_slow_impls);
}

const PrimitiveEntry& OneDnnHandler::entry() const {
  KILN_CHECK(entry_ != nullptr && entry_->primitive, "no primitive acquired");
  return *entry_;
}

// ---- Memory ------------------------------------------------------------------------------

dnnl::memory OneDnnHandler::AcquireMemory(const dnnl::memory::desc& md) { return dnnl::memory(md, Engine()); }

dnnl::memory OneDnnHandler::AcquireMemory(const dnnl::memory::desc& md, const Tensor& t) {
  KILN_CHECK(md.get_size() == t.bytes(), "oneDNN memory of ", md.get_size(), " bytes over tensor ", t.ShapeString());
  for (const Acquired& a : acquired_) {
    if (a.tensor->IsSharedBufferWith(t) && a.memory.get_desc() == md) return a.memory;
  }
  // oneDNN takes a non-const handle; inputs are only read.
  dnnl::memory m(md, Engine(), const_cast<void*>(t.raw_data()));
  acquired_.push_back({&t, m});
  return m;
}

dnnl::memory OneDnnHandler::AcquireMemory(const dnnl::memory::desc& md, Tensor* t) {
  KILN_CHECK(md.get_size() == t->bytes(), "oneDNN memory of ", md.get_size(), " bytes over tensor ",
             t->ShapeString());
  void* data = t->raw_mutable_data(DataType::kFP32);
  for (const Acquired& a : acquired_) {
    if (a.tensor->IsSharedBufferWith(*t) && a.memory.get_desc() == md) return a.memory;
  }
  dnnl::memory m(md, Engine(), data);
  acquired_.push_back({t, m});
  return m;
}

// ---- Execution ---------------------------------------------------------------------------

// Scratchpads and reordered arguments live for one primitive execution: they
// come from the caching allocator (its free lists serve them again on the
// next step, so steady-state execution takes nothing from the system) and go
// back to it right after, so they count as live only while an op runs.
void ExecutePrimitive(const dnnl::primitive& p, const dnnl::primitive_desc_base& pd, ExecArgs args, int threads,
                      void* scratchpad) {
  const dnnl::memory::desc scratch_md = pd.scratchpad_desc();
  std::unique_ptr<Allocation> scratch;
  if (scratch_md.get_size() > 0) {
    if (scratchpad == nullptr) {
      scratch = std::make_unique<Allocation>(scratch_md.get_size());
      scratchpad = scratch->ptr();
    }
    args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(scratch_md, OneDnnHandler::Engine(), scratchpad);
  }
  dnnl::stream& stream = OneDnnHandler::ThreadStream();
  DeterministicThreads one_thread(threads == 1);
  p.execute(stream, args);
  stream.wait();
}

namespace {

constexpr size_t kScratchAlign = 64;

size_t AlignScratch(size_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

}  // namespace

size_t EntryScratchBytes(const PrimitiveEntry& e) {
  size_t bytes = AlignScratch(e.pd.scratchpad_desc().get_size());
  for (const ArgReorder& r : e.reorders) bytes += AlignScratch(r.prim_md.get_size());
  return bytes;
}

void ExecuteEntry(const PrimitiveEntry& e, ExecArgs args, void* scratch) {
  KILN_CHECK(e.primitive, "executing a primitive cache entry without primitive");
  // Outputs are reordered back into the user's buffers after the primitive
  // ran: (index into e.reorders, the user's memory).
  std::vector<std::pair<size_t, dnnl::memory>> outputs;
  std::vector<std::unique_ptr<Allocation>> held;  // the reordered arguments, for this execution
  auto* next = static_cast<uint8_t*>(scratch);     // the scratch not taken yet
  for (size_t i = 0; i < e.reorders.size(); ++i) {
    const ArgReorder& r = e.reorders[i];
    auto it = args.find(r.arg);
    KILN_CHECK(it != args.end(), "argument ", r.arg, " of ", e.impl, " is not bound");
    void* buffer = next;
    if (next != nullptr) {
      next += AlignScratch(r.prim_md.get_size());
    } else {
      held.push_back(std::make_unique<Allocation>(r.prim_md.get_size()));
      buffer = held.back()->ptr();
    }
    dnnl::memory internal(r.prim_md, OneDnnHandler::Engine(), buffer);
    if (r.output) {
      outputs.emplace_back(i, it->second);
    } else {
      ExecutePrimitive(r.reorder, r.pd, {{DNNL_ARG_FROM, it->second}, {DNNL_ARG_TO, internal}}, e.threads);
    }
    it->second = internal;
  }
  ExecutePrimitive(e.primitive, e.pd, args, e.threads, next);
  for (const auto& [i, user] : outputs) {
    const ArgReorder& r = e.reorders[i];
    ExecutePrimitive(r.reorder, r.pd, {{DNNL_ARG_FROM, args.at(r.arg)}, {DNNL_ARG_TO, user}}, e.threads);
  }
}

dnnl::memory::desc UserDesc(const PrimitiveEntry& e, int arg) {
  for (const ArgReorder& r : e.reorders) {
    if (r.arg == arg) return r.user_md;
  }
  return e.pd.query_md(dnnl::query::exec_arg_md, arg);
}

void OneDnnHandler::Execute(ExecArgs args) {
  if (settings_.dry_run != nullptr) {
    for (ReorderNote& r : EntryReorders(entry())) settings_.dry_run->push_back(std::move(r));
    return;
  }
  ExecuteEntry(entry(), std::move(args));
}

dnnl::memory::desc OneDnnHandler::UserDesc(int arg) const { return onednn::UserDesc(entry(), arg); }

void OneDnnHandler::AddReorder(PrimitiveEntry* entry, int arg, bool output, const dnnl::memory::desc& user_md,
                               const dnnl::memory::desc& prim_md) {
  if (user_md == prim_md) return;
  ArgReorder r;
  r.arg = arg;
  r.output = output;
  r.user_md = user_md;
  r.prim_md = prim_md;
  const dnnl::memory::desc& from = output ? prim_md : user_md;
  const dnnl::memory::desc& to = output ? user_md : prim_md;
  dnnl::reorder::primitive_desc pd(Engine(), from, Engine(), to, DefaultAttr());
  r.pd = pd;
  r.reorder = dnnl::reorder(pd);
  entry->reorders.push_back(std::move(r));
}

void OneDnnHandler::ExecuteAux(size_t i, ExecArgs args) {
  KILN_CHECK(i < entry().aux.size(), "aux primitive ", i, " of ", entry().aux.size());
  if (settings_.dry_run != nullptr) return;
  ExecutePrimitive(entry().aux[i], entry().aux_pds[i], std::move(args), entry().threads);
}

}  // namespace kiln::onednn
