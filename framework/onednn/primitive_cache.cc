#include "framework/onednn/primitive_cache.h"

#include <sstream>

#include "framework/hash.h"
#include "oneapi/dnnl/dnnl_debug.h"

namespace kiln::onednn {

const char* PrimitiveKindName(PrimitiveKind kind) {
  switch (kind) {
    case PrimitiveKind::kMatmul: return "matmul";
    case PrimitiveKind::kConvForward: return "conv_fwd";
    case PrimitiveKind::kConvBackwardData: return "conv_bwd_data";
    case PrimitiveKind::kConvBackwardWeights: return "conv_bwd_weights";
    case PrimitiveKind::kPoolForward: return "pool_fwd";
    case PrimitiveKind::kPoolBackward: return "pool_bwd";
    case PrimitiveKind::kSoftmaxForward: return "softmax_fwd";
    case PrimitiveKind::kSoftmaxBackward: return "softmax_bwd";
    case PrimitiveKind::kLayerNormForward: return "layer_norm_fwd";
    case PrimitiveKind::kLayerNormBackward: return "layer_norm_bwd";
    case PrimitiveKind::kEltwiseForward: return "eltwise_fwd";
    case PrimitiveKind::kEltwiseBackward: return "eltwise_bwd";
    case PrimitiveKind::kBinary: return "binary";
    case PrimitiveKind::kSum: return "sum";
    case PrimitiveKind::kReduction: return "reduction";
    case PrimitiveKind::kConcat: return "concat";
    case PrimitiveKind::kLogSoftmaxForward: return "logsoftmax_fwd";
    case PrimitiveKind::kLogSoftmaxBackward: return "logsoftmax_bwd";
    case PrimitiveKind::kBatchNormForward: return "batch_norm_fwd";
    case PrimitiveKind::kBatchNormBackward: return "batch_norm_bwd";
  }
  return "?";
}

namespace {

void PrintDims(std::ostream& os, const char* name, const Dims& d) {
  if (!d.empty()) os << ' ' << name << '=' << DimsToString(d);
}

// "eltwise_gelu_tanh" -> "gelu_tanh".
std::string AlgorithmName(int algorithm) {
  std::string s = dnnl_alg_kind2str(static_cast<dnnl_alg_kind_t>(algorithm));
  const std::string prefix = "eltwise_";
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

}  // namespace

// ---- PostOp ----------------------------------------------------------------------

PostOp PostOp::Eltwise(dnnl::algorithm algorithm, float alpha, float beta) {
  PostOp p;
  p.kind = Kind::kEltwise;
  p.algorithm = static_cast<int>(algorithm);
  p.alpha = alpha;
  p.beta = beta;
  return p;
}

PostOp PostOp::Sum(float scale) {
  PostOp p;
  p.kind = Kind::kSum;
  p.scale = scale;
  return p;
}

bool PostOp::operator==(const PostOp& o) const {
  return kind == o.kind && algorithm == o.algorithm && FloatBits(scale) == FloatBits(o.scale) &&
         FloatBits(alpha) == FloatBits(o.alpha) && FloatBits(beta) == FloatBits(o.beta);
}

std::string PostOp::ToString() const {
  std::ostringstream os;
  os << '+' << (kind == Kind::kSum ? std::string("sum") : AlgorithmName(algorithm));
  std::vector<std::string> params;
  auto param = [&](const char* name, float v) {
    std::ostringstream p;
    p << name << '=' << v;
    params.push_back(p.str());
  };
  if (scale != 1.0f) param("scale", scale);
  if (alpha != 0.0f) param("alpha", alpha);
  if (beta != 0.0f) param("beta", beta);
  for (size_t i = 0; i < params.size(); ++i) os << (i ? "," : "(") << params[i];
  if (!params.empty()) os << ')';
  return os.str();
}

// ---- PrimitiveKey ----------------------------------------------------------------

bool PrimitiveKey::operator==(const PrimitiveKey& o) const {
  return kind == o.kind && dtype == o.dtype && compute == o.compute && a_dtype == o.a_dtype && b_dtype == o.b_dtype &&
         dims == o.dims &&
         algorithm == o.algorithm &&
         transpose_a == o.transpose_a && transpose_b == o.transpose_b && axis == o.axis && groups == o.groups &&
         kept_layout == o.kept_layout && kept_dtype == o.kept_dtype && src_kept_layout == o.src_kept_layout &&
         diff_src_kept_layout == o.diff_src_kept_layout &&
         kernel == o.kernel && strides == o.strides && dilations == o.dilations && padding_l == o.padding_l &&
         padding_r == o.padding_r && FloatBits(alpha) == FloatBits(o.alpha) &&
         FloatBits(beta) == FloatBits(o.beta) && FloatBits(epsilon) == FloatBits(o.epsilon) && flags == o.flags &&
         FloatBits(output_scale) == FloatBits(o.output_scale) && bias == o.bias && post_ops == o.post_ops &&
         threads == o.threads;
}

size_t PrimitiveKey::Hash() const {
  size_t seed = 0;
  HashCombine(seed, static_cast<uint64_t>(kind));
  HashCombine(seed, static_cast<uint64_t>(dtype));
  HashCombine(seed, static_cast<uint64_t>(compute));
  HashCombine(seed, static_cast<uint64_t>(a_dtype));
  HashCombine(seed, static_cast<uint64_t>(b_dtype));
  HashCombine(seed, dims.size());
  for (const Dims& d : dims) HashCombineDims(seed, d);
  HashCombine(seed, static_cast<uint64_t>(algorithm));
  HashCombine(seed, (transpose_a ? 1u : 0u) | (transpose_b ? 2u : 0u) | (bias ? 4u : 0u));
  HashCombine(seed, static_cast<uint64_t>(axis));
  HashCombine(seed, static_cast<uint64_t>(groups));
  HashCombine(seed, static_cast<uint64_t>(kept_layout));
  HashCombine(seed, static_cast<uint64_t>(kept_dtype));
  HashCombine(seed, static_cast<uint64_t>(src_kept_layout));
  HashCombine(seed, static_cast<uint64_t>(diff_src_kept_layout));
  HashCombineDims(seed, kernel);
  HashCombineDims(seed, strides);
  HashCombineDims(seed, dilations);
  HashCombineDims(seed, padding_l);
  HashCombineDims(seed, padding_r);
  HashCombineFloat(seed, alpha);
  HashCombineFloat(seed, beta);
  HashCombineFloat(seed, epsilon);
  HashCombine(seed, flags);
  HashCombineFloat(seed, output_scale);
  HashCombine(seed, post_ops.size());
  for (const PostOp& p : post_ops) {
    HashCombine(seed, (static_cast<uint64_t>(p.kind) << 32) | static_cast<uint32_t>(p.algorithm));
    HashCombineFloat(seed, p.scale);
    HashCombineFloat(seed, p.alpha);
    HashCombineFloat(seed, p.beta);
  }
  HashCombine(seed, static_cast<uint64_t>(threads));
  return seed;
}

std::string PrimitiveKey::ToString() const {
  std::ostringstream os;
  os << PrimitiveKindName(kind) << ' ' << DataTypeName(dtype) << ' ';
  if (compute != ComputeType::kF32) os << "compute=" << ComputeTypeName(compute) << ' ';
  if (a_dtype != DataType::kFP32) os << "a=" << DataTypeName(a_dtype) << ' ';
  if (b_dtype != DataType::kFP32) os << "b=" << DataTypeName(b_dtype) << ' ';
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? "x" : "") << DimsToString(dims[i]);
  if (algorithm != 0) os << " alg=" << dnnl_alg_kind2str(static_cast<dnnl_alg_kind_t>(algorithm));
  if (transpose_a) os << " trans_a";
  if (transpose_b) os << " trans_b";
  if (axis != 0) os << " axis=" << axis;
  if (groups != 1) os << " groups=" << groups;
  if (kept_layout != ActLayout::kPlain) os << " kept=" << ActLayoutName(kept_layout);
  if (kept_dtype != DataType::kFP32) os << " kept_dtype=" << DataTypeName(kept_dtype);
  if (src_kept_layout != ActLayout::kPlain) os << " src_kept=" << ActLayoutName(src_kept_layout);
  if (diff_src_kept_layout != ActLayout::kPlain) os << " diff_src_kept=" << ActLayoutName(diff_src_kept_layout);
  PrintDims(os, "kernel", kernel);
  PrintDims(os, "strides", strides);
  PrintDims(os, "dilations", dilations);
  PrintDims(os, "pad_l", padding_l);
  PrintDims(os, "pad_r", padding_r);
  if (alpha != 0.0f) os << " alpha=" << alpha;
  if (beta != 0.0f) os << " beta=" << beta;
  if (epsilon != 0.0f) os << " eps=" << epsilon;
  if (flags != 0) os << " flags=0x" << std::hex << flags << std::dec;
  // A matmul always shows its scale (its alpha attribute); others when set.
  if (kind == PrimitiveKind::kMatmul || output_scale != 1.0f) os << " scale=" << output_scale;
  if (bias) os << " +bias";
  for (const PostOp& p : post_ops) os << ' ' << p.ToString();
  if (threads != 0) os << " threads=" << threads;
  return os.str();
}

// ---- PrimitiveCache -------------------------------------------------------------

PrimitiveCache::PrimitiveCache(size_t capacity) : lru_(capacity) {}

PrimitiveCache& PrimitiveCache::Global() {
  // Leaked on purpose: kernels may run from threads that outlive static
  // destruction order guarantees.
  static PrimitiveCache* cache = new PrimitiveCache();
  return *cache;
}

std::shared_ptr<const PrimitiveEntry> PrimitiveCache::Find(const PrimitiveKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto* found = lru_.Find(key);
  if (found == nullptr) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  return *found;
}

std::shared_ptr<const PrimitiveEntry> PrimitiveCache::GetOrCreate(const PrimitiveKey& key, const CreateFn& create) {
  if (auto hit = Find(key)) return hit;
  // Creating a primitive can take milliseconds (JIT code generation); other
  // threads keep using the cache meanwhile.
  std::shared_ptr<const PrimitiveEntry> created = create();
  KILN_CHECK(created != nullptr, "primitive creation returned null for ", key.ToString());
  std::lock_guard<std::mutex> lock(mu_);
  if (const auto* first = lru_.Find(key)) return *first;
  evictions_ += static_cast<int64_t>(lru_.Insert(key, created));
  return created;
}

void PrimitiveCache::Insert(const PrimitiveKey& key, std::shared_ptr<const PrimitiveEntry> entry) {
  std::lock_guard<std::mutex> lock(mu_);
  evictions_ += static_cast<int64_t>(lru_.Insert(key, std::move(entry)));
}

std::vector<PrimitiveKey> PrimitiveCache::Keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.Keys();
}

bool PrimitiveCache::Contains(const PrimitiveKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.Contains(key);
}

PrimitiveCacheStats PrimitiveCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PrimitiveCacheStats s;
  s.hits = hits_;
  s.misses = misses_;
  s.evictions = evictions_;
  s.size = lru_.size();
  s.capacity = lru_.capacity();
  return s;
}

void PrimitiveCache::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  evictions_ += static_cast<int64_t>(lru_.set_capacity(capacity));
}

void PrimitiveCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  lru_.Clear();
  hits_ = misses_ = evictions_ = 0;
}

}  // namespace kiln::onednn
