// The compile cache's dynamic shapes (--jit_dynamic): which misses an object
// compiled for every value of some dims serves, which dims a compile makes
// symbolic, and the instances. CompileCache's other members are in
// compiler/compile_cache.cc.
#include "compiler/compile_cache.h"
#include "compiler/dynamic/instantiate.h"
#include "compiler/dynamic/lower_dynamic.h"

namespace kiln::jit {
namespace {

// Dynamic compiles of one set of symbol positions a cluster tries.
constexpr int kDynamicTries = 2;

}  // namespace

std::shared_ptr<const CompiledObject> CompileCache::DynamicParentLocked(const CacheKey& ck) const {
  if (options_.dynamic == DynamicPolicy::kOff) return nullptr;
  auto d = dynamic_.find(ck.key);
  if (d == dynamic_.end()) return nullptr;
  for (auto it = d->second.rbegin(); it != d->second.rend(); ++it) {
    if ((*it)->options == ck.options && (*it)->dynamic->Match(ck.signature)) return *it;
  }
  return nullptr;
}

std::vector<Symbol> CompileCache::SymbolsLocked(const CacheKey& ck, const JitSubgraph& subgraph) const {
  if (options_.dynamic == DynamicPolicy::kOff) return {};
  std::vector<Symbol> keep;
  if (auto d = dynamic_.find(ck.key); d != dynamic_.end() && !d->second.empty()) {
    keep = d->second.back()->dynamic->symbols;
  }
  std::vector<Symbol> symbols;
  if (auto last = last_signature_.find(ck.key); last != last_signature_.end()) {
    symbols = SymbolsForChange(last->second, ck.signature, keep);
  } else if (options_.dynamic == DynamicPolicy::kOn) {
    symbols = SymbolsForDeclared(subgraph, ck.signature);
  }
  if (symbols.empty()) return {};
  auto failed = dynamic_failed_.find(ck.key);
  if (failed != dynamic_failed_.end()) {
    auto tries = failed->second.find(SymbolPositionsKey(symbols));
    if (tries != failed->second.end() && tries->second >= kDynamicTries) return {};
  }
  return symbols;
}

std::shared_ptr<const CompiledObject> CompileCache::TryInstance(const CacheKey& ck, const CompiledObject& parent,
                                                                const proto::BlockDesc& block, const Future& mine) {
  std::unique_ptr<CompiledObject> obj;
  std::string why;
  try {
    obj = Instantiate(parent, ck.signature, block);
  } catch (const Error& e) {
    why = e.what();
  }
  std::lock_guard<std::mutex> lock(mu_);
  const std::string name = options_.cluster_name ? options_.cluster_name(ck.key) : ck.key;
  if (!obj) {
    ++stats_.guard_failures;
    if (options_.verbose >= 1) {
      LogLine(options_.log, "kiln jit: cluster " + name + ": its object for " + parent.dynamic->SignatureString() +
                                " cannot serve " + ck.signature.ToString() + " (" + why +
                                "); that signature compiles on its own");
    }
    return nullptr;  // the claim in flight stays for the compile
  }
  obj->id = next_id_++;
  std::shared_ptr<const CompiledObject> shared = std::move(obj);
  ++stats_.instances;
  stats_.instance_ms += shared->compile_ms;
  TrackLocked(shared);
  in_flight_.erase(ck);
  stats_.evictions += static_cast<int64_t>(cache_.Insert(ck, mine));
  if (options_.verbose >= 2) {
    LogLine(options_.log, "kiln jit: cluster " + name + " runs " + ck.signature.ToString() + " on its object for " +
                              shared->dynamic->SignatureString() + " (instance made in " +
                              std::to_string(shared->compile_ms) + " ms)");
  }
  return shared;
}

void CompileCache::NoteDynamicLocked(const CacheKey& ck, const JitSubgraph& subgraph,
                                     const std::vector<Symbol>& symbols,
                                     const std::shared_ptr<const CompiledObject>& obj, const std::string& why) {
  const std::string name = options_.cluster_name ? options_.cluster_name(ck.key) : ck.key;
  if (!obj->dynamic) {
    ++stats_.dynamic_failures;
    ++dynamic_failed_[ck.key][SymbolPositionsKey(symbols)];
    if (options_.verbose >= 1) {
      DynamicShape asked;
      asked.symbols = symbols;
      LogLine(options_.log, "kiln jit: cluster " + name + " stays specialised for " +
                                asked.SymbolsString(subgraph.inputs) + ": " + why);
    }
    return;
  }
  ++stats_.dynamic_compiles;
  dynamic_[ck.key].push_back(obj);
  if (options_.verbose >= 1) {
    LogLine(options_.log, "kiln jit: cluster " + name + " compiles once for every value of " +
                              obj->dynamic->SymbolsString(subgraph.inputs));
  }
}

}  // namespace kiln::jit
