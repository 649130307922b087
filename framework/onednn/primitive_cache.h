// Cache of oneDNN primitives keyed by a typed description of what the
// primitive computes (seed 001). A primitive is specific to the shapes it was
// created for, so every input's dims are part of the key: a new shape is a miss.
//
// The cache is bounded (least-recently-used entries are evicted beyond the
// capacity) and thread-safe. Kernels use PrimitiveCache::Global(); tests create
// their own instances.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dnnl.hpp"
#include "framework/act_layout.h"
#include "framework/data_type.h"
#include "framework/lru_cache.h"
#include "framework/tensor.h"

namespace kiln::onednn {

// Which oneDNN primitive (and which pass of it) a key describes.
enum class PrimitiveKind : uint8_t {
  kMatmul,
  kConvForward,
  kConvBackwardData,
  kConvBackwardWeights,
  kPoolForward,
  kPoolBackward,  // holds the forward-training pooling too (max: workspace)
  kSoftmaxForward,
  kSoftmaxBackward,
  kLayerNormForward,
  kLayerNormBackward,
  kEltwiseForward,
  kEltwiseBackward,
  kBinary,
  kSum,
  kReduction,
  kConcat,
  kLogSoftmaxForward,
  kLogSoftmaxBackward,
  kBatchNormForward,
  kBatchNormBackward,
};
const char* PrimitiveKindName(PrimitiveKind kind);

// One operation oneDNN applies to a primitive's result before it is stored
// (dnnl::post_ops), in order: an eltwise (dst = scale * eltwise(dst; alpha,
// beta)) or a sum with the previous contents of dst (dst += scale * old dst).
struct PostOp {
  enum class Kind : uint8_t { kEltwise, kSum };
  Kind kind = Kind::kEltwise;
  int algorithm = 0;  // eltwise: dnnl::algorithm
  float scale = 1.0f;
  float alpha = 0.0f;  // eltwise
  float beta = 0.0f;   // eltwise

  static PostOp Eltwise(dnnl::algorithm algorithm, float alpha = 0.0f, float beta = 0.0f);
  static PostOp Sum(float scale = 1.0f);
  bool operator==(const PostOp& other) const;
  bool operator!=(const PostOp& other) const { return !(*this == other); }
  // "+relu", "+gelu_tanh", "+linear(alpha=2,beta=1)", "+sum", "+sum(scale=0.5)".
  std::string ToString() const;
};

// Everything that changes the primitive a handler creates. Fields a kind does
// not use keep their defaults, so they never split entries.
struct PrimitiveKey {
  PrimitiveKind kind = PrimitiveKind::kMatmul;
  DataType dtype = DataType::kFP32;  // of the tensors the handler binds
  // What the primitive multiplies in (matmul): kBF16 takes bf16 operands,
  // converted from the f32 tensors by the entry's reorders, and writes f32.
  ComputeType compute = ComputeType::kF32;
  // matmul: the stored operands' types when they are not `dtype`. kBF16
  // (with compute kBF16): bf16 buffers the JIT made (a weight copy, an
  // lr-scaled operand), bound without a reorder.
  DataType a_dtype = DataType::kFP32;
  DataType b_dtype = DataType::kFP32;
  std::vector<Dims> dims;  // every input's dims, in the order the handler documents
  int algorithm = 0;       // dnnl::algorithm (eltwise, pooling, binary); 0 when unused
  bool transpose_a = false;  // matmul: src stored as [..., K, M]
  bool transpose_b = false;  // matmul: weights stored as [..., N, K]
  int64_t axis = 0;          // softmax/logsoftmax/concat axis, layer_norm begin_norm_axis
  int64_t groups = 1;        // convolution groups
  // convolution: the layout a blocked_layout chain keeps the forward's dst
  // (f32) and the backward's diff_dst (kept_dtype) in, bound without a
  // reorder.
  ActLayout kept_layout = ActLayout::kPlain;
  // convolution backward: the kept diff_dst's stored type (kBF16 under bf16
  // compute: written in bf16 by the kernel that computes it).
  DataType kept_dtype = DataType::kFP32;
  // convolution: the layout a chain keeps the f32 src (forward, weights'
  // backward) and diff_src (data backward) in, bound without a reorder.
  ActLayout src_kept_layout = ActLayout::kPlain;
  // convolution data backward: the layout diff_src is written in when the
  // src stays plain (src_kept_layout kPlain): a chain keeps the gradient of
  // a plain value blocked for its one reader.
  ActLayout diff_src_kept_layout = ActLayout::kPlain;
  Dims kernel;               // pooling window
  Dims strides;
  Dims dilations;            // oneDNN convention: 0 = dense
  Dims padding_l;            // top, left
  Dims padding_r;            // bottom, right
  float alpha = 0.0f;        // eltwise alpha
  float beta = 0.0f;         // eltwise beta
  float epsilon = 0.0f;      // layer_norm, batch_norm
  uint32_t flags = 0;        // layer_norm, batch_norm: dnnl::normalization_flags
  // What a fused forward primitive adds (dnnl::primitive_attr and the bias
  // argument): dst = post_ops(output_scale * (op result) + bias).
  float output_scale = 1.0f;    // fixed at creation; matmul: its alpha
  bool bias = false;            // matmul: [N] row; conv: [C_out]
  std::vector<PostOp> post_ops;
  // 0: created for OpenMP's thread count; 1: for one thread
  // (Settings::deterministic). Set by the handler base, not by handlers.
  int threads = 0;

  bool operator==(const PrimitiveKey& other) const;
  bool operator!=(const PrimitiveKey& other) const { return !(*this == other); }
  size_t Hash() const;
  // Readable one-line form for logs and dumps, e.g.
  // "matmul f32 [64,784]x[784,10] scale=1 +bias +relu", with bf16 compute
  // "matmul f32 compute=bf16 [64,784]x...", with bf16 weights "matmul f32
  // compute=bf16 b=bf16 [64,784]x..." (a=bf16 for a bf16 src; unused
  // fields are left out).
  std::string ToString() const;
};

struct PrimitiveKeyHash {
  size_t operator()(const PrimitiveKey& key) const { return key.Hash(); }
};

// Moves one argument of a primitive between the tensor's plain layout
// (user_md) and the layout the primitive chose for it (prim_md): before the
// primitive for inputs, after it for outputs.
struct ArgReorder {
  int arg = 0;  // DNNL_ARG_*
  bool output = false;
  dnnl::memory::desc user_md;
  dnnl::memory::desc prim_md;
  dnnl::primitive_desc_base pd;
  dnnl::primitive reorder;
};

// A cached primitive with its descriptor. The descriptors are kept as
// primitive_desc_base: every query a kernel needs (memory descs, workspace,
// scratchpad) is available there.
struct PrimitiveEntry {
  dnnl::primitive_desc_base pd;
  dnnl::primitive primitive;
  // Layout changes around the main primitive, for the arguments whose
  // layout it picked itself.
  std::vector<ArgReorder> reorders;
  // Primitives run together with the main one, in the order the handler
  // documents (e.g. the forward-training pooling whose workspace max-pooling
  // backward reads).
  std::vector<dnnl::primitive_desc_base> aux_pds;
  std::vector<dnnl::primitive> aux;
  // Where a fused bias binds: DNNL_ARG_BIAS, or the source of a binary
  // post-op when the bias has to follow an output scale (handler_util.h).
  int bias_arg = DNNL_ARG_BIAS;
  // oneDNN's implementation name of the main primitive ("brg:avx512_core"),
  // for logs and dumps; empty when there is no primitive.
  std::string impl;
  // True when oneDNN picked an implementation known to be slower than kiln's
  // reference kernel for the main or an aux primitive (see onednn_handler.h).
  bool slow_impl = false;
  // The key's PrimitiveKey::threads: 1 when the primitives (reorders and aux
  // included) were created for one OpenMP thread, which is then also what
  // they run on (ExecuteEntry); 0 for OpenMP's thread count.
  int threads = 0;
};

struct PrimitiveCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t evictions = 0;
  size_t size = 0;
  size_t capacity = 0;
};

class PrimitiveCache {
 public:
  static constexpr size_t kDefaultCapacity = 1024;

  explicit PrimitiveCache(size_t capacity = kDefaultCapacity);
  PrimitiveCache(const PrimitiveCache&) = delete;
  PrimitiveCache& operator=(const PrimitiveCache&) = delete;

  // The process-wide instance the oneDNN kernels use.
  static PrimitiveCache& Global();

  using CreateFn = std::function<std::shared_ptr<const PrimitiveEntry>()>;
  // Returns the entry of `key`, calling `create` on a miss and inserting its
  // result. `create` runs outside the lock, so concurrent misses of one key
  // may both create; the first insertion wins and both get that entry.
  // Exceptions from `create` propagate and nothing is inserted.
  std::shared_ptr<const PrimitiveEntry> GetOrCreate(const PrimitiveKey& key, const CreateFn& create);

  // Lookup without creating (counts a hit or a miss); nullptr on a miss.
  std::shared_ptr<const PrimitiveEntry> Find(const PrimitiveKey& key);
  // Inserts (or replaces) `key`, evicting the least recently used entries
  // beyond the capacity.
  void Insert(const PrimitiveKey& key, std::shared_ptr<const PrimitiveEntry> entry);

  // Keys from most to least recently used (for dumps and tests).
  std::vector<PrimitiveKey> Keys() const;
  bool Contains(const PrimitiveKey& key) const;

  PrimitiveCacheStats stats() const;
  // Shrinking evicts the least recently used entries at once. Capacity 0 is
  // treated as 1.
  void set_capacity(size_t capacity);
  // Drops every entry and zeroes the statistics.
  void Clear();

 private:
  mutable std::mutex mu_;
  LruCache<PrimitiveKey, std::shared_ptr<const PrimitiveEntry>, PrimitiveKeyHash> lru_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace kiln::onednn
