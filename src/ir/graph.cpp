// Out-of-line definitions of tpullm/ir/graph.hpp (compiled once into tpullm_core).
#include "tpullm/ir/graph.hpp"

namespace tpullm::ir {

DependencyGraph::DependencyGraph(const Function& f) {
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

auto DependencyGraph::topological_order() const -> std::vector<Operation*> {
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

auto DependencyGraph::reaches(const Operation* from, const Operation* to) const -> bool {
  std::vector<boost::default_color_type> color(ops_.size(), boost::white_color);
  auto cmap =
      boost::make_iterator_property_map(color.begin(), boost::get(boost::vertex_index, graph_));
  boost::breadth_first_visit(graph_, vertex(from), boost::color_map(cmap));
  return color[vertex(to)] != boost::white_color && from != to;
}

} // namespace tpullm::ir
