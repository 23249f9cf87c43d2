// `layer-group`: layer groups, tiles and core splits of Tpu functions (tiling/layer_group.hpp).
#include "tpullm/tiling/layer_group.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "tpullm/target/target.hpp"
#include "tpullm/tiling/core_split_plan.hpp"

namespace tpullm::tiling {

namespace {

using ir::Operation;
using ir::Value;

constexpr std::int64_t kGemmBlockRows = 336; ///< rows of x per weight pass of the GEMM kernel
constexpr std::int64_t kTileOverhead = 4096; ///< per op and tile, in bytes-equivalent
constexpr std::int64_t kMinTileRows = 16;

using ir::rows_of; // the row count tiles split, shared with the planner, executor and loader

bool is_builtin(const Operation& op) {
  return op.dialect() == ir::Dialect::builtin;
}

/// Bytes of the weights op reads.
std::int64_t weight_bytes(const Operation& op) {
  std::int64_t b = 0;
  for (const Value* v : op.operands())
    if (const Operation* d = v->defining_op(); d && d->is<ir::builtin::WeightOp>())
      b += v->type().byte_size();
  return b;
}

/// A projection: its weights are re-read once per GEMM block of rows.
bool is_gemm(const Operation& op) {
  return op.policy().split == ir::SplitRule::gemm;
}

/// True when `op` computes rows [r0, r1) of its [1, L, ...] results from rows [r0, r1) of its
/// row operands (plus whole weights / vectors), with L = `L`, as its policy declares. An op with
/// `before_group` operands (attention's keys and values) qualifies when those come from outside
/// `members`: they must be complete before its first tile.
bool row_local(const Operation& op, std::int64_t L, const std::set<const Operation*>& members) {
  const ir::OpPolicy& p = op.policy();
  if (!p.row_local || op.num_results() == 0 || rows_of(op.result(0)->type()) != L)
    return false;
  for (std::size_t i = 0; i < op.num_operands(); ++i) {
    const std::uint32_t bit = std::uint32_t{1} << i;
    if (!(p.row_operands & bit))
      continue;
    const ir::TensorType& t = op.operand(i)->type();
    if (rows_of(t) != L && !((p.vector_operands & bit) && t.rank() == 1))
      return false;
  }
  for (std::size_t i = 0; i < op.num_operands(); ++i)
    if (p.before_group & (std::uint32_t{1} << i)) {
      const Operation* d = op.operand(i)->defining_op();
      if (d && members.count(d))
        return false;
      if (d && d->policy().view)
        for (const Value* v : d->operands())
          if (v->defining_op() && members.count(v->defining_op()))
            return false;
    }
  return true;
}

/// Cost and tiling of running `ops` (consecutive, row-local, L rows) as one group.
struct GroupChoice {
  bool ok = false;
  std::int64_t tile = 0, count = 1, local = 0, cost = 0;
};

struct Costing {
  std::int64_t local_memory;
  std::int64_t forced_tile;

  /// Values defined in `ops` whose users are all in `ops` (and that are not returned).
  std::int64_t internal_row_bytes(const std::vector<Operation*>& ops, std::int64_t L,
                                  std::int64_t* escaping_bytes) const {
    const std::set<const Operation*> in(ops.begin(), ops.end());
    std::int64_t row = 0, esc = 0;
    for (const Operation* op : ops)
      for (std::size_t r = 0; r < op->num_results(); ++r) {
        const Value* v = op->result(r);
        const ir::OpPolicy& p = op->policy();
        bool inside = v->has_uses() && rows_of(v->type()) == L && !p.view &&
                      p.effect == ir::MemoryEffect::none;
        for (const Operation* u : v->users())
          inside = inside && in.count(u);
        if (inside)
          row += v->type().byte_size() / L;
        else if (!p.view)
          esc += v->type().byte_size();
      }
    *escaping_bytes = esc;
    return row;
  }

  std::int64_t value_traffic(std::int64_t bytes) const {
    return bytes > local_memory ? 2 * bytes : 0;
  }

  std::int64_t ungrouped(const std::vector<Operation*>& ops, std::int64_t L) const {
    std::int64_t c = 0;
    for (const Operation* op : ops) {
      c += weight_bytes(*op) * (is_gemm(*op) ? (L + kGemmBlockRows - 1) / kGemmBlockRows : 1);
      c += kTileOverhead;
      for (std::size_t r = 0; r < op->num_results(); ++r)
        if (!op->policy().view)
          c += value_traffic(op->result(r)->type().byte_size());
    }
    return c;
  }

  GroupChoice best(const std::vector<Operation*>& ops, std::int64_t L) const {
    GroupChoice g;
    std::int64_t esc = 0;
    const std::int64_t row = internal_row_bytes(ops, L, &esc);
    const std::int64_t budget = local_memory * 3 / 4; // a quarter stays for the kernels
    auto consider = [&](std::int64_t T) {
      const std::int64_t n = (L + T - 1) / T;
      if (n < 2 || row * T > budget)
        return;
      std::int64_t c =
          value_traffic(esc) + n * static_cast<std::int64_t>(ops.size()) * kTileOverhead;
      for (const Operation* op : ops)
        c += weight_bytes(*op) * n * (is_gemm(*op) ? (T + kGemmBlockRows - 1) / kGemmBlockRows : 1);
      if (!g.ok || c < g.cost)
        g = {true, T, n, (row * T + 63) / 64 * 64, c};
    };
    if (forced_tile > 0) {
      consider(std::min(forced_tile, L));
      return g;
    }
    for (std::int64_t n = 2; n <= (L + kMinTileRows - 1) / kMinTileRows; ++n)
      consider(((L + n - 1) / n + kMinTileRows - 1) / kMinTileRows * kMinTileRows);
    return g;
  }
};

class FunctionTiler {
public:
  FunctionTiler(ir::Function& f, const LayerGroupOptions& o, std::int64_t local, std::int64_t cores)
      : f_(f), o_(o), cost_{local, o.tile_rows}, cores_(cores) {}

  void run() {
    for (auto& op : f_.ops())
      if (!is_builtin(*op))
        ops_.push_back(op.get());
    for (Operation* op : ops_) {
      ir::OpPlan p;
      p.split = core_split(
          op->op(), op->num_operands(),
          [&](std::size_t k) -> const ir::TensorType& { return op->operand(k)->type(); }, cores_);
      // A heads split tiles the heads its policy's head operand counts (axis 2).
      if (const int h = op->policy().head_operand; h >= 0 && p.split.dim == ir::SliceDim::heads) {
        const std::int64_t heads = op->operand(static_cast<std::size_t>(h))->type().shape.at(2);
        const std::int64_t size = (heads + p.split.parts - 1) / p.split.parts;
        p.tile = {ir::SliceDim::heads, size, (heads + size - 1) / size};
      }
      op->set_plan(p);
    }
    if (!o_.groups)
      return;
    // Maximal runs of row-local ops over the same rows, then the best groups inside each run.
    std::size_t i = 0;
    while (i < ops_.size()) {
      const std::int64_t L = ops_[i]->num_results() ? rows_of(ops_[i]->result(0)->type()) : 0;
      std::set<const Operation*> run;
      std::size_t e = i;
      while (L >= 2 && e < ops_.size() && row_local(*ops_[e], L, run))
        run.insert(ops_[e++]);
      if (e == i) {
        ++i;
        continue;
      }
      split_run(i, e, L);
      i = e;
    }
  }

private:
  /// Chooses the sub-run of [b, e) whose grouping saves most, groups it, recurses on the rest.
  void split_run(std::size_t b, std::size_t e, std::int64_t L) {
    if (e - b < 2)
      return;
    std::int64_t best_gain = 0;
    std::size_t bb = 0, be = 0;
    GroupChoice best;
    for (std::size_t s = b; s < e; ++s)
      for (std::size_t t = s + 2; t <= e; ++t) {
        std::vector<Operation*> sub(ops_.begin() + static_cast<std::ptrdiff_t>(s),
                                    ops_.begin() + static_cast<std::ptrdiff_t>(t));
        const GroupChoice g = cost_.best(sub, L);
        if (!g.ok)
          continue;
        const std::int64_t gain = cost_.ungrouped(sub, L) - g.cost;
        // Forced tiles: the longest run that fits; else the run that saves most.
        const bool better = o_.tile_rows > 0 ? !best.ok || t - s > be - bb : gain > best_gain;
        if (better) {
          best_gain = gain;
          best = g;
          bb = s;
          be = t;
        }
      }
    if (!best.ok)
      return;
    const std::int64_t id = next_group_++;
    for (std::size_t k = bb; k < be; ++k) {
      ir::OpPlan p;
      p.group = id;
      p.tile = {ir::SliceDim::rows, best.tile, best.count};
      p.split = {ir::SliceDim::tiles, std::min(cores_, best.count)};
      p.local = best.local;
      ops_[k]->set_plan(p);
    }
    split_run(b, bb, L);
    split_run(be, e, L);
  }

  ir::Function& f_;
  const LayerGroupOptions& o_;
  Costing cost_;
  std::int64_t cores_;
  std::vector<Operation*> ops_;
  std::int64_t next_group_ = 0;
};

} // namespace

void layer_group(ir::Module& m, const LayerGroupOptions& o) {
  const target::Target host = target::host_target();
  const std::int64_t local = o.local_memory > 0 ? o.local_memory : host.local_memory;
  const std::int64_t cores = o.cores > 0 ? o.cores : host.cores;
  check(o.local_memory >= 0 && o.cores >= 0 && o.tile_rows >= 0, ErrorKind::invalid_input,
        "layer-group", "options must be >= 0");
  for (const auto& f : m.functions()) {
    for (const auto& op : f->ops())
      check(op->dialect() != ir::Dialect::top, ErrorKind::invalid_input, "@" + f->name(),
            "layer-group needs Tpu functions; run lower-to-tpu first (found ", op->name(), ")");
    FunctionTiler(*f, o, local, cores).run();
    const std::string bad = check_plans(*f, local);
    check(bad.empty(), ErrorKind::internal, "@" + f->name(), "layer groups are invalid: ", bad);
  }
}

std::string check_plans(const ir::Function& f, std::int64_t local_memory) {
  std::map<std::int64_t, const Operation*> first;
  std::int64_t last_group = -1;
  std::set<std::int64_t> closed;
  std::set<const Operation*> members;
  for (const auto& op : f.ops()) {
    if (op->dialect() == ir::Dialect::builtin)
      continue;
    if (!op->plan())
      continue;
    const ir::OpPlan& p = *op->plan();
    const std::string who = "'" + std::string(op->name()) + "'";
    if (p.split.parts < 1 || p.tile.count < 1)
      return who + " has a split or tile count below 1";
    if (p.group != last_group) {
      if (last_group >= 0)
        closed.insert(last_group);
      if (p.group >= 0 && closed.count(p.group))
        return "layer group " + std::to_string(p.group) + " is not consecutive";
      last_group = p.group;
      members.clear();
    }
    if (p.group < 0)
      continue;
    auto [it, fresh] = first.emplace(p.group, op.get());
    const ir::OpPlan& f0 = *it->second->plan();
    if (!fresh && (f0.tile != p.tile || f0.split != p.split || f0.local != p.local))
      return who + " in layer group " + std::to_string(p.group) + " has another tile plan";
    if (p.tile.dim == ir::SliceDim::rows) {
      const std::int64_t L = rows_of(it->second->result(0)->type());
      if (p.tile.size < 1 || p.tile.size * p.tile.count < L ||
          p.tile.size * (p.tile.count - 1) >= L)
        return who + ": " + std::to_string(p.tile.count) + " tiles of " +
               std::to_string(p.tile.size) + " rows do not cover " + std::to_string(L) + " rows";
      if (!row_local(*op, L, members))
        return who + " is not row-local over the group's " + std::to_string(L) + " rows";
      if (p.split.dim != ir::SliceDim::tiles || p.split.parts > p.tile.count)
        return who + ": a row-tiled group splits its tiles across cores";
    }
    if (local_memory > 0 && p.local > local_memory)
      return "layer group " + std::to_string(p.group) + " needs " + std::to_string(p.local) +
             " bytes of local memory, the target has " + std::to_string(local_memory);
    members.insert(op.get());
  }
  return "";
}

} // namespace tpullm::tiling
