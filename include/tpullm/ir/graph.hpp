#pragma once
/// Dependency graphs of a function on Boost.Graph: one vertex per op, an edge from each op to
/// every op that uses one of its results. Used for schedules, fusion legality (reachability)
/// and, later, liveness and layer groups. The Boost.Graph type stays in src/ir/graph.cpp: this
/// header is part of tpullm/ir/ir.hpp, and Boost.Graph's headers cost every includer seconds.

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "tpullm/ir/function.hpp"

namespace tpullm::ir {

/// The def-use graph of a function's ops (vertex i = i-th op in program order).
class DependencyGraph {
public:
  explicit DependencyGraph(const Function& f);
  ~DependencyGraph();
  DependencyGraph(DependencyGraph&&) noexcept;
  DependencyGraph& operator=(DependencyGraph&&) noexcept;

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
  struct Impl; // the boost::adjacency_list (bidirectional, vertex i = ops_[i])
  std::unique_ptr<Impl> impl_;
};

} // namespace tpullm::ir
