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

  explicit DependencyGraph(const Function& f) {
    for (const auto& op : f.ops()) {
      index_[op.get()] = ops_.size();
      ops_.push_back(op.get());
    }
    graph_ = Graph(ops_.size());
    for (std::size_t i = 0; i < ops_.size(); ++i)
      for (auto* v : ops_[i]->operands())
        if (auto* d = v->defining_op()) {
          auto it = index_.find(d);
          if (it == index_.end())
            throw Error(ErrorKind::internal, "", "operand defined outside the function");
          boost::add_edge(it->second, i, graph_);
        }
  }

  const Graph& graph() const { return graph_; }
  std::size_t size() const { return ops_.size(); }
  Operation* op(std::size_t v) const { return ops_.at(v); }
  std::size_t vertex(const Operation* op) const { return index_.at(op); }

  /// Ops in a topological order (definitions before uses); throws on a cycle.
  std::vector<Operation*> topological_order() const {
    std::vector<std::size_t> rev;
    try {
      boost::topological_sort(graph_, std::back_inserter(rev));
    } catch (const boost::not_a_dag&) {
      throw Error(ErrorKind::internal, "", "the function's dependency graph has a cycle");
    }
    std::vector<Operation*> order;
    for (auto it = rev.rbegin(); it != rev.rend(); ++it)
      order.push_back(ops_[*it]);
    return order;
  }

  /// True when `to` depends (transitively) on `from`.
  bool reaches(const Operation* from, const Operation* to) const {
    std::vector<boost::default_color_type> color(ops_.size(), boost::white_color);
    auto cmap =
        boost::make_iterator_property_map(color.begin(), boost::get(boost::vertex_index, graph_));
    boost::breadth_first_visit(graph_, vertex(from), boost::color_map(cmap));
    return color[vertex(to)] != boost::white_color && from != to;
  }

private:
  std::vector<Operation*> ops_;
  std::map<const Operation*, std::size_t> index_;
  Graph graph_;
};

} // namespace tpullm::ir
