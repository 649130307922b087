// Acquire-style handler base for oneDNN kernels (seed 004).
//
// A derived handler describes one op family: its constructor builds the
// PrimitiveKey from dims and attributes, and CreateForward()/CreateBackward()
// build the primitive descriptors and primitives for that key. The base class
// owns everything common: the process-wide CPU engine, the calling thread's
// stream and scratchpad, the cache lookup, and memory objects that wrap kiln
// tensors without copying.
//
// Layouts: every memory descriptor a handler creates is dense row-major
// ("abcd..."), the layout of a kiln Tensor, so tensor buffers are handed to
// oneDNN as they are.
//
// Thread safety (seed 001): a cached primitive may run on several threads at
// once. Each primitive is created with a user-managed scratchpad, and each
// thread executes on its own stream with a scratchpad taken from the caching
// allocator for that execution.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "dnnl.hpp"
#include "framework/onednn/primitive_cache.h"
#include "framework/onednn/reorder_note.h"
#include "framework/onednn/settings.h"
#include "framework/tensor.h"

namespace kiln::onednn {

// oneDNN dims of kiln dims.
dnnl::memory::dims ToDnnlDims(const Dims& dims);
// Dense row-major descriptor of `dims` (f32 unless said otherwise).
dnnl::memory::desc PlainDesc(const Dims& dims, dnnl::memory::data_type type = dnnl::memory::data_type::f32);
// Row-major descriptor of `dims` whose last two dims are stored swapped
// (the tensor holds [..., b, a] and is read as [..., a, b]).
dnnl::memory::desc TransposedLastTwoDesc(const Dims& dims,
                                         dnnl::memory::data_type type = dnnl::memory::data_type::f32);

// True for an implementation the handlers refuse unless
// Settings::allow_slow_impls ("ref:", "simple_nchw:"; see settings.h).
bool IsSlowImplementation(const std::string& impl);
// Rank of the instruction set named in an implementation string
// ("jit:avx512_core", "brgconv:avx512_core_amx", "x64:gemm:jit"): higher is
// the newer ISA; gemm-based implementations rank 0, slow ones
// (IsSlowImplementation: reference) -1.
int IsaRank(const std::string& impl);

// True when every tensor is FP32 (the only dtype these kernels handle) and
// non-empty.
bool AllFp32(std::initializer_list<const Tensor*> tensors);

using ExecArgs = std::unordered_map<int, dnnl::memory>;

// The descriptor a buffer bound to `arg` of `entry` must have: the plain side
// of the argument's reorder, else the primitive's own descriptor.
dnnl::memory::desc UserDesc(const PrimitiveEntry& entry, int arg);

// Runs a cached entry on buffers someone else binds (compiled code holds raw
// pointers, not Tensors): the input reorders, the main primitive, then the
// output reorders, with `args` bound to the user side of each argument (see
// UserDesc). The scratchpad and the reordered arguments are taken from the
// caching allocator for this one execution and returned right after, so
// they show in its statistics while the primitive runs and in no buffer
// afterwards. Runs on the calling thread's stream and waits, on one OpenMP
// thread when the entry was created for one (PrimitiveEntry::threads).
// Thread-safe: one entry may run on several threads at once.
// With `scratch` (EntryScratchBytes(entry) bytes, 64-byte aligned, the
// caller's alone for the call: compiled code plans it in its arena) the
// reordered arguments and the main primitive's scratchpad are carved from it
// instead.
void ExecuteEntry(const PrimitiveEntry& entry, ExecArgs args, void* scratch = nullptr);
// The bytes ExecuteEntry's `scratch` must hold for `entry`.
size_t EntryScratchBytes(const PrimitiveEntry& entry);
// One primitive of an entry (an aux primitive, a reorder) with a scratchpad
// held for this execution (or `scratchpad`, when given: at least the
// primitive's scratchpad size), on one thread when `threads` is 1 (the
// entry's PrimitiveEntry::threads).
void ExecutePrimitive(const dnnl::primitive& p, const dnnl::primitive_desc_base& pd, ExecArgs args, int threads,
                      void* scratchpad = nullptr);

// ---- What the reorders are (kiln dump's reorders.txt) -------------------------------------
// oneDNN's name of an execution argument ("src", "diff_dst"; "arg N" for
// one without a name here).
std::string ArgName(int arg);
// A memory descriptor's data type and format tag as ONEDNN_VERBOSE prints
// them: "f32:abcd", "f32:aBcd16b" ("f32:any" for format any).
std::string MemoryDescTag(const dnnl::memory::desc& md);
// "convolution backward_weights": the kind of `pd` and its propagation kind
// when it has one.
std::string PrimitiveLabel(const dnnl::primitive_desc_base& pd);
// The reorder from `from` to `to` that moves argument `arg` of the primitive
// `primitive` (PrimitiveLabel) before it runs, or after it for an output.
ReorderNote NoteOf(const dnnl::memory::desc& from, const dnnl::memory::desc& to, int arg, bool output,
                   const std::string& primitive);
// The reorders ExecuteEntry runs for `entry`, in the order it runs them:
// the inputs', then the outputs' after the primitive.
std::vector<ReorderNote> EntryReorders(const PrimitiveEntry& entry);

class OneDnnHandler {
 public:
  virtual ~OneDnnHandler() = default;
  OneDnnHandler(const OneDnnHandler&) = delete;
  OneDnnHandler& operator=(const OneDnnHandler&) = delete;

  // The process-wide CPU engine.
  static const dnnl::engine& Engine();
  // The calling thread's stream, created on first use.
  static dnnl::stream& ThreadStream();
  // The attributes every primitive is created with (user scratchpad).
  static dnnl::primitive_attr DefaultAttr();

  const Settings& settings() const { return settings_; }
  const PrimitiveKey& forward_key() const { return fwd_key_; }
  const PrimitiveKey& backward_key() const { return bwd_key_; }

  // Looks the forward (backward) primitive of the handler's key up in the
  // cache, creating it with CreateForward() (CreateBackward()) on a miss, and
  // makes it the current primitive for the Acquire*Memory calls and
  // Execute(). Returns false when oneDNN has no implementation for it (the
  // negative answer is cached too) or only a slow one (unless the settings
  // allow it); the kernel then falls back. With settings().deterministic the
  // primitive is created for one thread, under a key of its own.
  bool AcquireForwardPrimitive();
  bool AcquireBackwardPrimitive();
  const PrimitiveEntry& entry() const;
  // The entry the last Acquire*Primitive call looked up, shared with the
  // cache: without primitive when oneDNN has none, slow ones included. For
  // code that keeps it and runs it later (ExecuteEntry).
  const std::shared_ptr<const PrimitiveEntry>& acquired_entry() const { return entry_; }

  // Memory objects over tensor buffers, with the current primitive's
  // descriptors (the plain side of an argument the primitive reorders).
  // Outputs get their buffer allocated first. When an output tensor shares
  // its buffer with a tensor acquired before (in-place run), the same memory
  // object is returned, so oneDNN sees one buffer.
  dnnl::memory AcquireSrcMemory(const Tensor& t) { return AcquireMemory(UserDesc(DNNL_ARG_SRC), t); }
  dnnl::memory AcquireSrc1Memory(const Tensor& t) { return AcquireMemory(UserDesc(DNNL_ARG_SRC_1), t); }
  dnnl::memory AcquireWeightsMemory(const Tensor& t) { return AcquireMemory(UserDesc(DNNL_ARG_WEIGHTS), t); }
  dnnl::memory AcquireDiffDstMemory(const Tensor& t) { return AcquireMemory(UserDesc(DNNL_ARG_DIFF_DST), t); }
  dnnl::memory AcquireDstMemory(Tensor* t) { return AcquireMemory(UserDesc(DNNL_ARG_DST), t); }
  dnnl::memory AcquireDiffSrcMemory(Tensor* t) { return AcquireMemory(UserDesc(DNNL_ARG_DIFF_SRC), t); }
  dnnl::memory AcquireDiffWeightsMemory(Tensor* t) { return AcquireMemory(UserDesc(DNNL_ARG_DIFF_WEIGHTS), t); }
  // The descriptor a tensor bound to `arg` must have: the plain side of the
  // argument's reorder, else the primitive's own descriptor.
  dnnl::memory::desc UserDesc(int arg) const;
  // A buffer of the handler's own (workspace, an output nobody needs).
  dnnl::memory AcquireMemory(const dnnl::memory::desc& md);
  // Wraps `t` (same number of bytes as `md` describes; the dims may differ,
  // e.g. a [B,S,K] tensor read as [B*S,K]).
  dnnl::memory AcquireMemory(const dnnl::memory::desc& md, const Tensor& t);
  dnnl::memory AcquireMemory(const dnnl::memory::desc& md, Tensor* t);

  // Runs the current primitive (or its aux primitive `i`) with `args`, as
  // ExecuteEntry (ExecutePrimitive) does. In a dry run
  // (Settings::dry_run) neither runs anything: Execute lists the entry's
  // reorders there (EntryReorders).
  void Execute(ExecArgs args);
  void ExecuteAux(size_t i, ExecArgs args);

 protected:
  OneDnnHandler(PrimitiveCache& cache, const Settings& settings) : cache_(cache), settings_(settings) {}

  // Build the primitives of fwd_key_ / bwd_key_. May throw dnnl::error when
  // oneDNN has no implementation.
  virtual PrimitiveEntry CreateForward() const;
  virtual PrimitiveEntry CreateBackward() const;
  // For a primitive created with format "any" for `arg`: adds the reorder
  // between the tensor's plain layout and the chosen one (nothing when they
  // are the same).
  static void AddReorder(PrimitiveEntry* entry, int arg, bool output, const dnnl::memory::desc& user_md,
                         const dnnl::memory::desc& prim_md);

  PrimitiveKey fwd_key_;
  PrimitiveKey bwd_key_;

 private:
  bool Acquire(const PrimitiveKey& key, bool forward);

  PrimitiveCache& cache_;
  const Settings settings_;
  std::shared_ptr<const PrimitiveEntry> entry_;
  struct Acquired {
    const Tensor* tensor;
    dnnl::memory memory;
  };
  std::vector<Acquired> acquired_;
};

}  // namespace kiln::onednn
