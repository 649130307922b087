// ClusterGraph: the op DAG of build_jit_pass, contracted cluster by cluster
// without ever closing a cycle.
//
// Node i is the op at topological position i. An edge a -> b is contracted
// only when no other path leads from a to b (the merged node would lie on a
// cycle otherwise). A topological rank per live node stays valid across
// contractions, so each check only visits the nodes ranked between the two
// ends (Pearce and Kelly's dynamic topological order, as XLA's GraphCycles):
// O(K + E) log K at worst per contraction attempt.
#pragma once

#include <set>
#include <utility>
#include <vector>

namespace kiln {

class ClusterGraph {
 public:
  // preds[i] holds the positions (< i) of the ops op i depends on.
  explicit ClusterGraph(const std::vector<std::vector<int>>& preds);

  // The node that stands for `node`'s cluster.
  int Find(int node);
  // Ops in the cluster of representative `rep`.
  int Size(int rep) const { return size_[rep]; }

  // Contracts the edge a -> b of two representatives into a, unless another
  // path from a to b exists. Returns -1 when contracted, else the first node
  // of such a path.
  int TryContract(int a, int b);
  // Merges two representatives that need not share an edge (siblings),
  // unless a path joins them either way. Returns whether it merged.
  bool TryMergeSiblings(int a, int b);

 private:
  void Visit(int node, int root, std::vector<std::pair<int, int>>* stack);
  void Reorder(int a, int b, std::vector<int>& forward, std::vector<int>& backward);
  void Merge(int a, int b);

  std::vector<int> parent_;
  std::vector<int> rank_;
  std::vector<int> size_;
  std::vector<std::set<int>> succ_;
  std::vector<std::set<int>> pred_;
  std::vector<unsigned> mark_;
  unsigned epoch_ = 0;
};

}  // namespace kiln
