// LruCache: a bounded map that evicts its least recently used entries.
//
// The core of kiln's caches (oneDNN primitives, compiled objects). It is not
// thread-safe: a cache that is shared between threads holds its own mutex
// around every call, and keeps its own statistics (what counts as a hit is
// the caller's business, e.g. a Find that returns an entry still being built).
//
// Key: copyable or movable, with ==; Hash: a functor over Key (std::hash by
// default, or e.g. a struct key's Hash() behind a small functor). Value:
// anything movable (a shared_ptr, a std::shared_future, a struct).
//
// Order: Find and Insert make an entry the most recently used; Peek, Contains
// and iteration do not. Iteration and Keys() go from most to least recently
// used. Capacity 0 is treated as 1, so the entry just inserted always stays.
// Pointers returned by Find/Peek stay valid until that entry is erased,
// replaced or evicted.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kiln {

template <typename Key, typename Value, typename Hash = std::hash<Key>>
class LruCache {
 public:
  using value_type = std::pair<const Key, Value>;
  using const_iterator = typename std::list<value_type>::const_iterator;
  // Called for each evicted entry, least recently used first, before it is
  // destroyed.
  using EvictFn = std::function<void(const Key&, Value&)>;

  explicit LruCache(size_t capacity, Hash hash = Hash())
      : capacity_(capacity == 0 ? 1 : capacity), index_(0, RefHash{std::move(hash)}) {}
  LruCache(const LruCache&) = delete;
  LruCache& operator=(const LruCache&) = delete;
  // Moving keeps the list nodes, so the index's references stay valid.
  LruCache(LruCache&&) = default;
  LruCache& operator=(LruCache&&) = default;

  // The value of `key` (now the most recently used), or nullptr.
  Value* Find(const Key& key) {
    auto it = index_.find(std::cref(key));
    if (it == index_.end()) return nullptr;
    entries_.splice(entries_.begin(), entries_, it->second);
    return &it->second->second;
  }

  // The value of `key` without changing the order, or nullptr.
  const Value* Peek(const Key& key) const {
    auto it = index_.find(std::cref(key));
    return it == index_.end() ? nullptr : &it->second->second;
  }

  bool Contains(const Key& key) const { return index_.count(std::cref(key)) != 0; }

  // Inserts `key` (or replaces its value) as the most recently used entry,
  // then evicts least recently used entries beyond the capacity. Returns how
  // many were evicted.
  size_t Insert(Key key, Value value, const EvictFn& on_evict = nullptr) {
    auto it = index_.find(std::cref(key));
    if (it != index_.end()) {
      it->second->second = std::move(value);
      entries_.splice(entries_.begin(), entries_, it->second);
      return 0;
    }
    entries_.emplace_front(std::move(key), std::move(value));
    // The index refers to the key inside the list node: nodes never move,
    // and a key with heap-allocated parts (dims) is stored once.
    try {
      index_.emplace(std::cref(entries_.front().first), entries_.begin());
    } catch (...) {
      entries_.pop_front();
      throw;
    }
    return EvictBeyondCapacity(on_evict);
  }

  // Removes `key`; false when it was not there.
  bool Erase(const Key& key) {
    auto it = index_.find(std::cref(key));
    if (it == index_.end()) return false;
    const auto node = it->second;
    index_.erase(it);  // before the node: the index's key lives in it
    entries_.erase(node);
    return true;
  }

  void Clear() {
    index_.clear();
    entries_.clear();
  }

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  size_t capacity() const { return capacity_; }
  // Shrinking evicts the least recently used entries at once; returns how
  // many. Capacity 0 is treated as 1.
  size_t set_capacity(size_t capacity, const EvictFn& on_evict = nullptr) {
    capacity_ = capacity == 0 ? 1 : capacity;
    return EvictBeyondCapacity(on_evict);
  }

  // Most to least recently used.
  const_iterator begin() const { return entries_.begin(); }
  const_iterator end() const { return entries_.end(); }
  std::vector<Key> Keys() const {
    std::vector<Key> keys;
    keys.reserve(entries_.size());
    for (const value_type& e : entries_) keys.push_back(e.first);
    return keys;
  }

 private:
  using KeyRef = std::reference_wrapper<const Key>;
  struct RefHash {
    Hash hash;
    size_t operator()(KeyRef k) const { return hash(k.get()); }
  };
  struct RefEqual {
    bool operator()(KeyRef a, KeyRef b) const { return a.get() == b.get(); }
  };

  size_t EvictBeyondCapacity(const EvictFn& on_evict) {
    size_t evicted = 0;
    while (entries_.size() > capacity_) {
      value_type& last = entries_.back();
      if (on_evict) on_evict(last.first, last.second);
      index_.erase(std::cref(last.first));
      entries_.pop_back();
      ++evicted;
    }
    return evicted;
  }

  size_t capacity_;
  std::list<value_type> entries_;  // front: most recently used
  std::unordered_map<KeyRef, typename std::list<value_type>::iterator, RefHash, RefEqual> index_;
};

}  // namespace kiln
