#include "framework/onednn/primitive_cache.h"

#include <cstring>
#include <sstream>

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
  }
  return "?";
}

namespace {

// Floats compare by bit pattern: a key must equal itself even when it holds a
// NaN, and hashing must agree with ==.
uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

void HashCombine(size_t& seed, uint64_t v) {
  // 64-bit mix (splitmix64 finaliser) folded into the running seed.
  v += 0x9e3779b97f4a7c15ull;
  v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ull;
  v = (v ^ (v >> 27)) * 0x94d049bb133111ebull;
  v ^= v >> 31;
  seed ^= static_cast<size_t>(v) + 0x9e3779b9 + (seed << 6) + (seed >> 2);
}

void HashDims(size_t& seed, const Dims& d) {
  HashCombine(seed, d.size());
  for (int64_t x : d) HashCombine(seed, static_cast<uint64_t>(x));
}

void PrintDims(std::ostream& os, const char* name, const Dims& d) {
  if (!d.empty()) os << ' ' << name << '=' << DimsToString(d);
}

}  // namespace

bool PrimitiveKey::operator==(const PrimitiveKey& o) const {
  return kind == o.kind && dtype == o.dtype && dims == o.dims && algorithm == o.algorithm &&
         transpose_a == o.transpose_a && transpose_b == o.transpose_b && axis == o.axis && groups == o.groups &&
         kernel == o.kernel && strides == o.strides && dilations == o.dilations && padding_l == o.padding_l &&
         padding_r == o.padding_r && FloatBits(alpha) == FloatBits(o.alpha) &&
         FloatBits(beta) == FloatBits(o.beta) && FloatBits(epsilon) == FloatBits(o.epsilon) && flags == o.flags;
}

size_t PrimitiveKey::Hash() const {
  size_t seed = 0;
  HashCombine(seed, static_cast<uint64_t>(kind));
  HashCombine(seed, static_cast<uint64_t>(dtype));
  HashCombine(seed, dims.size());
  for (const Dims& d : dims) HashDims(seed, d);
  HashCombine(seed, static_cast<uint64_t>(algorithm));
  HashCombine(seed, (transpose_a ? 1u : 0u) | (transpose_b ? 2u : 0u));
  HashCombine(seed, static_cast<uint64_t>(axis));
  HashCombine(seed, static_cast<uint64_t>(groups));
  HashDims(seed, kernel);
  HashDims(seed, strides);
  HashDims(seed, dilations);
  HashDims(seed, padding_l);
  HashDims(seed, padding_r);
  HashCombine(seed, FloatBits(alpha));
  HashCombine(seed, FloatBits(beta));
  HashCombine(seed, FloatBits(epsilon));
  HashCombine(seed, flags);
  return seed;
}

std::string PrimitiveKey::ToString() const {
  std::ostringstream os;
  os << PrimitiveKindName(kind) << ' ' << DataTypeName(dtype) << ' ';
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? "x" : "") << DimsToString(dims[i]);
  if (algorithm != 0) os << " alg=" << dnnl_alg_kind2str(static_cast<dnnl_alg_kind_t>(algorithm));
  if (transpose_a) os << " trans_a";
  if (transpose_b) os << " trans_b";
  if (axis != 0) os << " axis=" << axis;
  if (groups != 1) os << " groups=" << groups;
  PrintDims(os, "kernel", kernel);
  PrintDims(os, "strides", strides);
  PrintDims(os, "dilations", dilations);
  PrintDims(os, "pad_l", padding_l);
  PrintDims(os, "pad_r", padding_r);
  if (kind == PrimitiveKind::kMatmul || alpha != 0.0f) os << " alpha=" << alpha;
  if (beta != 0.0f) os << " beta=" << beta;
  if (epsilon != 0.0f) os << " eps=" << epsilon;
  if (flags != 0) os << " flags=0x" << std::hex << flags << std::dec;
  return os.str();
}

// ---- PrimitiveCache -------------------------------------------------------------

PrimitiveCache::PrimitiveCache(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

PrimitiveCache& PrimitiveCache::Global() {
  // Leaked on purpose: kernels may run from threads that outlive static
  // destruction order guarantees.
  static PrimitiveCache* cache = new PrimitiveCache();
  return *cache;
}

std::shared_ptr<const PrimitiveEntry> PrimitiveCache::Find(const PrimitiveKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

std::shared_ptr<const PrimitiveEntry> PrimitiveCache::GetOrCreate(const PrimitiveKey& key, const CreateFn& create) {
  if (auto hit = Find(key)) return hit;
  // Creating a primitive can take milliseconds (JIT code generation); other
  // threads keep using the cache meanwhile.
  std::shared_ptr<const PrimitiveEntry> created = create();
  KILN_CHECK(created != nullptr, "primitive creation returned null for ", key.ToString());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  InsertLocked(key, created);
  return created;
}

void PrimitiveCache::Insert(const PrimitiveKey& key, std::shared_ptr<const PrimitiveEntry> entry) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) {
    it->second->second = std::move(entry);
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  InsertLocked(key, std::move(entry));
}

void PrimitiveCache::InsertLocked(const PrimitiveKey& key, std::shared_ptr<const PrimitiveEntry> entry) {
  lru_.emplace_front(key, std::move(entry));
  index_[key] = lru_.begin();
  EvictLocked();
}

void PrimitiveCache::EvictLocked() {
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
    ++evictions_;
  }
}

std::vector<PrimitiveKey> PrimitiveCache::Keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PrimitiveKey> keys;
  keys.reserve(lru_.size());
  for (const Item& item : lru_) keys.push_back(item.first);
  return keys;
}

bool PrimitiveCache::Contains(const PrimitiveKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.count(key) != 0;
}

PrimitiveCacheStats PrimitiveCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PrimitiveCacheStats s;
  s.hits = hits_;
  s.misses = misses_;
  s.evictions = evictions_;
  s.size = lru_.size();
  s.capacity = capacity_;
  return s;
}

void PrimitiveCache::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = capacity == 0 ? 1 : capacity;
  EvictLocked();
}

void PrimitiveCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  lru_.clear();
  index_.clear();
  hits_ = misses_ = evictions_ = 0;
}

}  // namespace kiln::onednn
