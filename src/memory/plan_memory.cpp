// `plan-memory`: buffers for every value of Tpu functions (memory/plan_memory.hpp).
#include "tpullm/memory/plan_memory.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <unordered_map>

#include "tpullm/memory/interval_alloc.hpp"
#include "tpullm/memory/kv_geometry.hpp"

namespace tpullm::memory {

namespace {

using ir::Operation;
using ir::Region;
using ir::Value;

std::int64_t bytes_of(const ir::TensorType& t) {
  return t.byte_size();
}

using ir::rows_of;

/// What a storage class is placed in.
enum class Home { arena, local, input, output, kv, weight };

struct KvSlot {
  std::int64_t layer = 0;
  int kind = 0;
  std::int64_t pos_stride = 0;
};

/// Plans one function.
class FunctionPlanner {
public:
  FunctionPlanner(ir::Function& f, const PlanMemoryOptions& o, std::int64_t capacity,
                  std::int64_t kv_row)
      : f_(f), o_(o), capacity_(capacity), kv_row_(kv_row) {}

  void run() {
    number();
    views_and_in_place();
    classify();
    place();
    write();
  }

private:
  // ---- values and classes ------------------------------------------------------------------

  int id(const Value* v) const { return ids_.at(v); }
  /// Root of i and i's byte offset from it.
  std::pair<int, std::int64_t> find(int i) const {
    std::int64_t d = 0;
    while (parent_[i] != i) {
      d += delta_[i];
      i = parent_[i];
    }
    return {i, d};
  }
  /// Makes `view` share the bytes of `of` at byte offset `delta` from it.
  void alias(const Value* view, const Value* of, std::int64_t delta) {
    const int v = id(view);
    const auto [r, d] = find(id(of));
    parent_[v] = r;
    delta_[v] = d + delta;
    extent_[r] = std::max(extent_[r], d + delta + bytes_of(view->type()));
    last_[r] = std::max(last_[r], last_use_[v]);
  }

  void number() {
    f_.number_ops();
    auto add = [&](const Value* v, std::int64_t def) {
      ids_[v] = static_cast<int>(values_.size());
      values_.push_back(v);
      def_.push_back(def);
      std::int64_t last = def;
      for (const Operation* u : v->users())
        last = std::max(last, u->number());
      last_use_.push_back(last);
    };
    for (std::size_t i = 0; i < f_.num_arguments(); ++i)
      add(f_.argument(i), -1);
    for (const auto& op : f_.ops())
      for (std::size_t r = 0; r < op->num_results(); ++r)
        add(op->result(r), op->number());
    const std::size_t n = values_.size();
    parent_.resize(n);
    std::iota(parent_.begin(), parent_.end(), 0);
    delta_.assign(n, 0);
    extent_.resize(n);
    last_ = last_use_;
    for (std::size_t i = 0; i < n; ++i)
      extent_[i] = bytes_of(values_[i]->type());
    kv_.assign(n, std::nullopt);
    for (const auto& op : f_.ops())
      if (op->plan() && op->plan()->group >= 0) {
        const std::int64_t g = op->plan()->group, k = op->number();
        auto it = groups_.find(g);
        if (it == groups_.end())
          groups_[g] = {k, k};
        else
          it->second = {std::min(it->second.first, k), std::max(it->second.second, k)};
      }
  }

  bool is_plain_result(int r) const {
    const Value* v = values_[static_cast<std::size_t>(r)];
    return !v->is_argument() && !v->defining_op()->is<ir::builtin::WeightOp>() && !kv_[r];
  }

  /// Views, KV stores and in-place results, as each op's policy says (each reads its
  /// kSourceOperand).
  void views_and_in_place() {
    for (const auto& op : f_.ops()) {
      const ir::OpPolicy& p = op->policy();
      if (p.view) {
        alias(op->result(0), op->operand(ir::kSourceOperand), 0);
      } else if (p.offset_view) {
        const std::int64_t d = ir::view_offset(op->op(), op->operand(ir::kSourceOperand)->type());
        if (d >= 0)
          alias(op->result(0), op->operand(ir::kSourceOperand), d);
      } else if (p.effect == ir::MemoryEffect::writes_kv) {
        const ir::KvCacheRef& c = *ir::kv_cache_of(op->op());
        const KvSlot slot{c.layer, c.kv == ir::KvKind::key ? 0 : 1, kv_row_};
        const auto [r, d] = find(id(op->operand(ir::kSourceOperand)));
        // A batched decode's rows go to different conversations' caches: stored by copy.
        const bool batched = op->operand(ir::kSourceOperand)->type().shape.at(0) > 1;
        const bool eligible = o_.kv_in_place && !batched && is_plain_result(r) && d == 0 &&
                              extent_[r] == bytes_of(op->result(0)->type()) && !returned_root(r);
        if (eligible) {
          alias(op->result(0), op->operand(ir::kSourceOperand), 0);
          kv_[r] = slot;
          store_in_place_.push_back(op.get());
        } else {
          kv_[id(op->result(0))] = slot;
        }
      } else if (p.in_place) {
        const auto [r, d] = find(id(op->operand(ir::kSourceOperand)));
        if (is_plain_result(r) && d == 0 && last_[r] == op->number() &&
            extent_[r] == bytes_of(op->result(0)->type()) && !returned_root(r))
          alias(op->result(0), op->operand(ir::kSourceOperand), 0);
      }
    }
  }

  bool returned_root(int r) const {
    const Operation* ret = f_.return_op();
    if (!ret)
      return false;
    for (const Value* v : ret->operands())
      if (find(id(v)).first == r)
        return true;
    return false;
  }

  // ---- homes -------------------------------------------------------------------------------

  void classify() {
    const std::size_t n = values_.size();
    home_.assign(n, Home::arena);
    slot_.assign(n, 0);
    // Cache operands (a KV append's history) are the cache itself.
    for (const auto& op : f_.ops())
      if (const int k = op->policy().kv_cache_operand; k >= 0) {
        const ir::Value* cache = op->operand(static_cast<std::size_t>(k));
        check(cache->is_argument(), ErrorKind::invalid_input, "@" + f_.name(), op->name(),
              "'s history must be a function argument (the cache)");
        const ir::KvCacheRef& c = *ir::kv_cache_of(op->op());
        kv_[id(cache)] = KvSlot{c.layer, c.kv == ir::KvKind::key ? 0 : 1, 0};
      }
    for (std::size_t i = 0; i < n; ++i) {
      if (find(static_cast<int>(i)).first != static_cast<int>(i))
        continue;
      const Value* v = values_[i];
      if (kv_[i])
        home_[i] = Home::kv;
      else if (v->is_argument()) {
        home_[i] = Home::input;
        slot_[i] = v->index();
      } else if (v->defining_op()->is<ir::builtin::WeightOp>())
        home_[i] = Home::weight;
    }
    // Returned values are produced in the caller's output span when their class is theirs alone.
    if (const Operation* ret = f_.return_op())
      for (std::size_t j = 0; j < ret->num_operands(); ++j) {
        const Value* v = ret->operand(j);
        const auto [r, d] = find(id(v));
        if (home_[r] == Home::arena && d == 0 && extent_[r] == bytes_of(v->type()) &&
            !output_taken_.count(r)) {
          home_[r] = Home::output;
          slot_[r] = static_cast<std::int64_t>(j);
          output_taken_.insert({r, j});
        }
      }
    // Classes that live and die inside one row-tiled layer group go to local memory.
    for (std::size_t i = 0; i < n; ++i) {
      if (find(static_cast<int>(i)).first != static_cast<int>(i) || home_[i] != Home::arena)
        continue;
      const std::int64_t g = group_of_class(static_cast<int>(i));
      if (g >= 0)
        home_[i] = Home::local;
    }
  }

  /// The row-tiled group every member of class r is defined and used in, or -1.
  std::int64_t group_of_class(int r) const {
    std::int64_t g = -1;
    for (std::size_t i = 0; i < values_.size(); ++i) {
      const auto [root, delta] = find(static_cast<int>(i));
      if (root != r)
        continue;
      if (delta != 0)
        return -1; // per-tile storage holds whole rows of the class, not offsets into it
      const Value* v = values_[i];
      const Operation* d = v->defining_op();
      if (!d || !d->plan() || d->plan()->group < 0 || d->plan()->tile.dim != ir::SliceDim::rows ||
          d->plan()->tile.count <= 1 || rows_of(v->type()) == 0)
        return -1;
      if (g >= 0 && d->plan()->group != g)
        return -1;
      g = d->plan()->group;
      for (const Operation* u : v->users())
        if (!u->plan() || u->plan()->group != g)
          return -1;
    }
    return g;
  }

  // ---- placement ---------------------------------------------------------------------------

  std::int64_t group_first(std::int64_t g) const { return groups_.at(g).first; }
  std::int64_t group_last(std::int64_t g) const { return groups_.at(g).second; }

  /// Live range of class r in op numbers, widened to whole layer groups.
  Interval interval(int r) const {
    Interval it{std::numeric_limits<std::int64_t>::max(), -1, extent_[r]};
    for (std::size_t i = 0; i < values_.size(); ++i) {
      if (find(static_cast<int>(i)).first != r)
        continue;
      const Value* v = values_[i];
      std::int64_t s = def_[i], e = last_use_[i];
      if (const Operation* d = v->defining_op(); d && d->plan() && d->plan()->group >= 0)
        s = std::min(s, group_first(d->plan()->group));
      for (const Operation* u : v->users())
        if (u->plan() && u->plan()->group >= 0)
          e = std::max(e, group_last(u->plan()->group));
      it.start = std::min(it.start, s);
      it.end = std::max(it.end, e);
    }
    return it;
  }

  /// Bytes of class r per tile of its group.
  std::int64_t tile_bytes(int r) const {
    const Value* v = values_[static_cast<std::size_t>(r)];
    const ir::OpPlan& p = *v->defining_op()->plan();
    const std::int64_t rows = rows_of(v->type());
    return extent_[r] / rows * std::min(rows, p.tile.size);
  }

  Strategy strategy() const {
    if (o_.strategy == "first-fit")
      return Strategy::first_fit;
    if (o_.strategy == "best-fit")
      return Strategy::best_fit;
    if (o_.strategy == "coloring")
      return Strategy::coloring;
    check(o_.strategy == "best", ErrorKind::invalid_input, "plan-memory option 'strategy'",
          "must be best, first-fit, best-fit or coloring, got '", o_.strategy, "'");
    return Strategy::best_fit;
  }

  Placement run_strategy(const std::vector<Interval>& items) const {
    return o_.strategy == "best" ? place_best(items, o_.alignment)
                                 : memory::place(items, strategy(), o_.alignment);
  }

  void place() {
    std::vector<int> arena_roots;
    std::map<std::int64_t, std::vector<int>> local_roots;
    for (std::size_t i = 0; i < values_.size(); ++i) {
      if (find(static_cast<int>(i)).first != static_cast<int>(i))
        continue;
      if (home_[i] == Home::arena)
        arena_roots.push_back(static_cast<int>(i));
      else if (home_[i] == Home::local)
        local_roots[values_[i]->defining_op()->plan()->group].push_back(static_cast<int>(i));
    }
    offset_.assign(values_.size(), 0);
    std::vector<Interval> items;
    for (int r : arena_roots)
      items.push_back(interval(r));
    Placement p = run_strategy(items);
    for (std::size_t k = 0; k < arena_roots.size(); ++k)
      offset_[arena_roots[k]] = p.offsets[k];
    info_.arena = p.peak;
    info_.lower_bound = max_live_bytes(items, o_.alignment);
    info_.strategy = std::string(strategy_name(p.strategy));
    for (const auto& [g, roots] : local_roots) {
      std::vector<Interval> li;
      for (int r : roots) {
        Interval it = interval(r);
        it.size = tile_bytes(r);
        li.push_back(it);
      }
      Placement lp = run_strategy(li);
      for (std::size_t k = 0; k < roots.size(); ++k)
        offset_[roots[k]] = lp.offsets[k];
      local_peak_[g] = lp.peak;
      info_.local = std::max(info_.local, lp.peak);
    }
  }

  std::int64_t kv_base(const KvSlot& s) const {
    return kv_cache_offset(s.layer, s.kind, capacity_, kv_row_);
  }

  void write() {
    for (std::size_t i = 0; i < values_.size(); ++i) {
      const auto [r, d] = find(static_cast<int>(i));
      const Value* v = values_[i];
      ir::Buffer b;
      b.size = bytes_of(v->type());
      b.view = r != static_cast<int>(i);
      b.offset = d;
      switch (home_[r]) {
      case Home::arena:
        b.region = Region::arena;
        b.offset += offset_[r];
        break;
      case Home::local: // per tile: the rows of one tile, at the class's offset
        b.region = Region::local;
        b.offset = offset_[r];
        b.size = b.size / rows_of(v->type()) *
                 std::min(rows_of(v->type()), v->defining_op()->plan()->tile.size);
        break;
      case Home::input:
        b.region = Region::input;
        b.slot = slot_[r];
        break;
      case Home::output:
        b.region = Region::output;
        b.slot = slot_[r];
        break;
      case Home::kv:
        b.region = Region::kv;
        b.offset += kv_base(*kv_[r]);
        b.pos_stride = kv_[r]->pos_stride;
        break;
      case Home::weight:
        b.region = Region::weight;
        break;
      }
      const_cast<Value*>(v)->set_buffer(b);
    }
    // A store whose operand was produced in the cache copies nothing: mark it a view.
    for (Operation* st : store_in_place_) {
      auto b = *st->result(0)->buffer();
      b.view = true;
      st->result(0)->set_buffer(b);
    }
    info_.kv_capacity = any_kv() ? capacity_ : 0;
    info_.kv_row = any_kv() ? kv_row_ : 0;
    ir::FunctionInfo fi = f_.info();
    fi.memory = info_;
    f_.set_info(fi);
  }

  bool any_kv() const {
    return std::any_of(kv_.begin(), kv_.end(), [](const auto& k) { return k.has_value(); });
  }

  ir::Function& f_;
  const PlanMemoryOptions& o_;
  std::int64_t capacity_, kv_row_;
  std::unordered_map<const Value*, int> ids_;
  std::vector<const Value*> values_;
  std::vector<std::int64_t> def_, last_use_, last_, extent_, delta_, offset_, slot_;
  std::vector<int> parent_;
  std::vector<std::optional<KvSlot>> kv_;
  std::vector<Home> home_;
  std::map<int, std::size_t> output_taken_;
  std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> groups_;
  std::map<std::int64_t, std::int64_t> local_peak_;
  std::vector<Operation*> store_in_place_;
  ir::MemoryInfo info_;
};

} // namespace

std::int64_t kv_cache_offset(std::int64_t layer, int kind, std::int64_t capacity,
                             std::int64_t row_bytes) {
  return KvGeometry{0, capacity, row_bytes}.cache_offset(layer, kind);
}

KvNeeds kv_needs(const ir::Module& m, KvNeeds need) {
  for (const auto& f : m.functions())
    for (const auto& op : f->ops()) {
      // The ops that touch the cache, as their policies say: their result 0 is a view of it.
      const ir::OpPolicy& p = op->policy();
      if (p.effect != ir::MemoryEffect::writes_kv && p.kv_cache_operand < 0)
        continue;
      const ir::TensorType& t = op->result(0)->type();
      const std::int64_t r = kv_row_bytes(t);
      check(need.row == 0 || need.row == r, ErrorKind::invalid_input, "@" + f->name(),
            "KV rows of ", r, " bytes differ from ", need.row, " bytes elsewhere in the module");
      need.row = r;
      need.capacity = std::max(need.capacity, t.shape[1]);
    }
  return need;
}

void plan_memory(ir::Module& m, const PlanMemoryOptions& o) {
  check(o.alignment > 0 && (o.alignment & (o.alignment - 1)) == 0, ErrorKind::invalid_input,
        "plan-memory option 'alignment'", "must be a power of two, got ", o.alignment);
  check(o.kv_capacity >= 0, ErrorKind::invalid_input, "plan-memory option 'kv-capacity'",
        "must be >= 0, got ", o.kv_capacity);
  // One KV geometry for the whole module: row bytes agree, capacity covers every view.
  const KvNeeds need = kv_needs(m);
  std::int64_t capacity = need.capacity;
  const std::int64_t row = need.row;
  if (o.kv_capacity > 0) {
    check(o.kv_capacity >= capacity, ErrorKind::invalid_input, "plan-memory option 'kv-capacity'",
          o.kv_capacity, " slots are fewer than the ", capacity, " a KV view of the module spans");
    capacity = o.kv_capacity;
  }
  for (const auto& f : m.functions()) {
    for (const auto& op : f->ops())
      check(op->dialect() != ir::Dialect::top, ErrorKind::invalid_input, "@" + f->name(),
            "plan-memory needs Tpu functions; run lower-to-tpu first (found ", op->name(), ")");
    FunctionPlanner(*f, o, capacity, row).run();
    const std::string bad = check_memory_plan(*f);
    check(bad.empty(), ErrorKind::internal, "@" + f->name(), "memory plan is invalid: ", bad);
  }
}

std::string check_memory_plan(const ir::Function& fc) {
  auto& f = const_cast<ir::Function&>(fc);
  const auto& info = f.info().memory;
  if (!info)
    return "the function has no memory plan";
  f.number_ops();
  struct Item {
    const Value* v;
    ir::Buffer b;
    std::int64_t start, end, group;
  };
  std::vector<Item> items;
  auto visit = [&](const Value* v, std::int64_t def) -> std::string {
    if (!v->buffer())
      return "a value of type " + v->type().str() + " has no buffer";
    const ir::Buffer& b = *v->buffer();
    if (b.size < 0 || b.offset < 0)
      return "a buffer has a negative offset or size";
    std::int64_t end = def;
    for (const Operation* u : v->users())
      end = std::max(end, u->number());
    std::int64_t group = -1;
    if (const Operation* d = v->defining_op(); d && d->plan())
      group = d->plan()->group;
    switch (b.region) {
    case Region::arena:
      if (b.end() > info->arena)
        return "an arena buffer ends at " + std::to_string(b.end()) + " beyond the arena of " +
               std::to_string(info->arena);
      break;
    case Region::local:
      if (b.end() > info->local)
        return "a local buffer ends beyond the local memory of " + std::to_string(info->local);
      break;
    case Region::kv: {
      if (info->kv_row <= 0 || info->kv_capacity <= 0)
        return "a kv buffer in a function without a KV geometry";
      const std::int64_t cache = info->kv_capacity * info->kv_row;
      const std::int64_t start = b.offset / cache * cache;
      // A batched decode's [B, S, ...] KV value is B rows of conversations, each in its own
      // cache at the same offset: one row's bytes must fit the layer cache.
      const std::int64_t batch = v->type().rank() == 4 ? v->type().shape[0] : 1;
      if (batch < 1 || b.size % batch != 0 || b.offset + b.size / batch > start + cache)
        return "a kv buffer crosses the end of its layer cache";
      break;
    }
    default:
      break;
    }
    if (!b.view && (b.region == Region::arena || b.region == Region::local))
      items.push_back({v, b, def, end, group});
    return "";
  };
  for (std::size_t i = 0; i < f.num_arguments(); ++i)
    if (auto e = visit(f.argument(i), -1); !e.empty())
      return e;
  for (const auto& op : f.ops())
    for (std::size_t r = 0; r < op->num_results(); ++r)
      if (auto e = visit(op->result(r), op->number()); !e.empty())
        return e;
  // Views extend their storage's lifetime: recompute ends through the view chains.
  std::unordered_map<const Value*, std::int64_t> end_of;
  for (const auto& it : items)
    end_of[it.v] = it.end;
  for (const auto& op : f.ops())
    for (std::size_t r = 0; r < op->num_results(); ++r) {
      const Value* v = op->result(r);
      if (!v->buffer()->view || op->num_operands() == 0)
        continue;
      std::int64_t e = v->defining_op()->number();
      for (const Operation* u : v->users())
        e = std::max(e, u->number());
      // Walk to the storage this view shares.
      const Value* src = op->operand(ir::kSourceOperand);
      while (src->buffer() && src->buffer()->view && src->defining_op() &&
             src->defining_op()->num_operands() > 0)
        src = src->defining_op()->operand(ir::kSourceOperand);
      auto it = end_of.find(src);
      if (it != end_of.end())
        it->second = std::max(it->second, e);
    }
  for (std::size_t i = 0; i < items.size(); ++i)
    for (std::size_t j = i + 1; j < items.size(); ++j) {
      const Item &a = items[i], &b = items[j];
      if (a.b.region != b.b.region)
        continue;
      if (a.b.region == Region::local && a.group != b.group)
        continue; // each group's tiles have the local memory to themselves
      const std::int64_t ae = end_of[a.v], be = end_of[b.v];
      const bool live_together = a.start <= be && b.start <= ae;
      const bool apart = a.b.end() <= b.b.offset || b.b.end() <= a.b.offset;
      if (live_together && !apart && a.b.size > 0 && b.b.size > 0)
        return "two simultaneously live " + std::string(ir::enum_name(a.b.region)) +
               " buffers overlap: [" + std::to_string(a.b.offset) + ", " +
               std::to_string(a.b.end()) + ") and [" + std::to_string(b.b.offset) + ", " +
               std::to_string(b.b.end()) + ")";
    }
  return "";
}

} // namespace tpullm::memory
