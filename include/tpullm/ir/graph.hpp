#pragma once
/// Dependency graphs of a function on Boost.Graph: one vertex per op, an edge from each op to
/// every op that uses one of its results. Used for schedules, fusion legality (reachability)
/// and, later, liveness and layer groups.

#include <algorithm>
#include <map>
#include <stdexcept>
#include <vector>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/topological_sort.hpp>

#include "tpullm/ir/function.hpp"

namespace tpullm::ir {

/// The def-use graph of a function's ops (vertex i = i-th op in program order).
class DependencyGraph {
public:
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;

  explicit DependencyGraph(const Function& f);

  const Graph& graph() const { return graph_; }
  std::size_t size() const { return ops_.size(); }
  Operation* op(std::size_t v) const { return ops_.at(v); }
  std::size_t vertex(const Operation* op) const { return index_.at(op); }

  /// Ops in a topological order (definitions before uses); throws on a cycle.
  std::vector<Operation*> topological_order() const;

  /// True when `to` depends (transitively) on `from`.
  bool reaches(const Operation* from, const Operation* to) const;

private:
  std::vector<Operation*> ops_;
  std::map<const Operation*, std::size_t> index_;
  Graph graph_;
};

} // namespace tpullm::ir
