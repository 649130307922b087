#include "passes/cluster_graph.h"

#include <algorithm>

#include "framework/error.h"

namespace kiln {

ClusterGraph::ClusterGraph(const std::vector<std::vector<int>>& preds)
    : parent_(preds.size()), rank_(preds.size()), size_(preds.size(), 1), succ_(preds.size()), pred_(preds.size()),
      mark_(preds.size(), 0) {
  for (size_t i = 0; i < preds.size(); ++i) {
    parent_[i] = static_cast<int>(i);
    rank_[i] = static_cast<int>(i);
    for (int p : preds[i]) {
      KILN_CHECK(p < static_cast<int>(i), "build_jit_pass: dependency ", p, " -> ", i, " against topological order");
      pred_[i].insert(p);
      succ_[p].insert(static_cast<int>(i));
    }
  }
}

int ClusterGraph::Find(int node) {
  int root = node;
  while (parent_[root] != root) root = parent_[root];
  while (parent_[node] != root) node = std::exchange(parent_[node], root);
  return root;
}

int ClusterGraph::TryContract(int a, int b) {
  KILN_CHECK(succ_[a].count(b) == 1 && rank_[a] < rank_[b], "build_jit_pass: no edge ", a, " -> ", b);
  // Nodes reachable from a (not through b) ranked before b; a node ranked
  // after b cannot reach b.
  std::vector<int> forward;
  std::vector<std::pair<int, int>> stack;  // (node, successor of a it was reached from)
  ++epoch_;
  for (int s : succ_[a]) {
    if (s != b && rank_[s] < rank_[b]) Visit(s, s, &stack);
  }
  while (!stack.empty()) {
    auto [x, root] = stack.back();
    stack.pop_back();
    forward.push_back(x);
    for (int y : succ_[x]) {
      if (y == b) return root;
      if (rank_[y] < rank_[b]) Visit(y, root, &stack);
    }
  }
  // Nodes reaching b (not through a) ranked after a. None is in `forward`
  // (that would be a path a -> b).
  std::vector<int> backward;
  ++epoch_;
  for (int p : pred_[b]) {
    if (p != a && rank_[p] > rank_[a]) Visit(p, p, &stack);
  }
  while (!stack.empty()) {
    int x = stack.back().first;
    stack.pop_back();
    backward.push_back(x);
    for (int y : pred_[x]) {
      if (rank_[y] > rank_[a]) Visit(y, y, &stack);
    }
  }
  Reorder(a, b, forward, backward);
  Merge(a, b);
  return -1;
}

bool ClusterGraph::TryMergeSiblings(int a, int b) {
  if (a == b) return true;
  if (rank_[a] > rank_[b]) std::swap(a, b);
  if (succ_[a].count(b)) return TryContract(a, b) < 0;
  // An edge a -> b keeps the ranks in order (rank a < rank b); contracting it
  // succeeds exactly when no other path leads from a to b. A path from b to
  // a cannot exist, since b ranks after a.
  succ_[a].insert(b);
  pred_[b].insert(a);
  if (TryContract(a, b) < 0) return true;
  succ_[a].erase(b);
  pred_[b].erase(a);
  return false;
}

void ClusterGraph::Visit(int node, int root, std::vector<std::pair<int, int>>* stack) {
  if (mark_[node] == epoch_) return;
  mark_[node] = epoch_;
  stack->push_back({node, root});
}

// Re-ranks the affected window so that `backward`, then the merged a+b, then
// `forward` are in order, reusing the window's ranks: backward takes the
// lowest (each rank only drops), forward the highest (each only rises), so
// edges to and from the rest of the graph stay ordered. b's rank is dropped.
void ClusterGraph::Reorder(int a, int b, std::vector<int>& forward, std::vector<int>& backward) {
  auto by_rank = [&](int x, int y) { return rank_[x] < rank_[y]; };
  std::sort(forward.begin(), forward.end(), by_rank);
  std::sort(backward.begin(), backward.end(), by_rank);
  std::vector<int> pool = {rank_[a], rank_[b]};
  for (int x : forward) pool.push_back(rank_[x]);
  for (int x : backward) pool.push_back(rank_[x]);
  std::sort(pool.begin(), pool.end());
  size_t i = 0;
  for (int x : backward) rank_[x] = pool[i++];
  rank_[a] = pool[i++];
  ++i;
  for (int x : forward) rank_[x] = pool[i++];
}

void ClusterGraph::Merge(int a, int b) {
  parent_[b] = a;
  size_[a] += size_[b];
  for (int p : pred_[b]) {
    succ_[p].erase(b);
    if (p == a) continue;
    succ_[p].insert(a);
    pred_[a].insert(p);
  }
  for (int s : succ_[b]) {
    pred_[s].erase(b);
    succ_[a].insert(s);
    pred_[s].insert(a);
  }
  pred_[b].clear();
  succ_[b].clear();
}

}  // namespace kiln
