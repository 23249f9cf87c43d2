// Out-of-line definitions of tpullm/ir/graph.hpp (compiled once into tpullm_core).
#include "tpullm/ir/graph.hpp"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/topological_sort.hpp>

namespace tpullm::ir {

struct DependencyGraph::Impl {
  boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS> graph;
};

DependencyGraph::~DependencyGraph() = default;
DependencyGraph::DependencyGraph(DependencyGraph&&) noexcept = default;
DependencyGraph& DependencyGraph::operator=(DependencyGraph&&) noexcept = default;

DependencyGraph::DependencyGraph(const Function& f) : impl_(std::make_unique<Impl>()) {
  for (const auto& op : f.ops()) {
    index_[op.get()] = ops_.size();
    ops_.push_back(op.get());
  }
  auto& g = impl_->graph;
  g = decltype(impl_->graph)(ops_.size());
  for (std::size_t i = 0; i < ops_.size(); ++i)
    for (auto* v : ops_[i]->operands())
      if (auto* d = v->defining_op()) {
        auto it = index_.find(d);
        if (it == index_.end())
          throw Error(ErrorKind::internal, "", "operand defined outside the function");
        boost::add_edge(it->second, i, g);
      }
}

auto DependencyGraph::topological_order() const -> std::vector<Operation*> {
  std::vector<std::size_t> rev;
  const auto& g = impl_->graph;
  try {
    boost::topological_sort(g, std::back_inserter(rev));
  } catch (const boost::not_a_dag&) {
    throw Error(ErrorKind::internal, "", "the function's dependency graph has a cycle");
  }
  std::vector<Operation*> order;
  for (auto it = rev.rbegin(); it != rev.rend(); ++it)
    order.push_back(ops_[*it]);
  return order;
}

auto DependencyGraph::reaches(const Operation* from, const Operation* to) const -> bool {
  const auto& g = impl_->graph;
  std::vector<boost::default_color_type> color(ops_.size(), boost::white_color);
  auto cmap = boost::make_iterator_property_map(color.begin(), boost::get(boost::vertex_index, g));
  boost::breadth_first_visit(g, vertex(from), boost::color_map(cmap));
  return color[vertex(to)] != boost::white_color && from != to;
}

} // namespace tpullm::ir
