// Matcher: a byte-level pushdown matcher over the compiled grammar (grammar_impl.hpp).
//
// A parse is a stack of positions in the compiled code (the top one at a bytes element, the
// ones below it return addresses); stacks are hash-consed into nodes (position, parent), so a
// stack is one id and equal stacks are the same id. The matcher's state is the set of its
// stacks, interned too: a state is one id, and the byte transitions between states are memoised
// in a table (a DFA built lazily). The token mask walks the tokenizer's trie (text::TokenTable)
// in preorder through that table, skipping the subtree of a byte no stack takes, and is cached
// per state.
//
// Most of a walk depends only on the top of the stacks: inside a JSON string, every string of
// the answer has the same top frames and differs only below them. So the walk runs on the state
// cut at its shallowest frame (every stack's frames below that depth replaced by one "context"
// node, kCtx), cached per cut state: a token decided within the top frames is decided for every
// state with that top; a token whose parse pops into the context is "uncertain" and is checked
// byte by byte against the whole state. The result is exact: the same mask as the full walk.
#include <algorithm>
#include <unordered_map>

#include "grammar_impl.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/text/tokenizer.hpp"

namespace tpullm::grammar {

namespace detail {

/// FNV-1a over a set's stack ids.
struct VecHash {
  std::size_t operator()(const std::vector<std::int32_t>& v) const noexcept {
    std::size_t h = 1469598103934665603ull;
    for (const std::int32_t x : v)
      h = (h ^ static_cast<std::uint32_t>(x)) * 1099511628211ull;
    return h;
  }
};

} // namespace detail

namespace {
constexpr std::size_t kMaxCachedMasks = 128; // masks kept per matcher (~19 KiB each at 152k)
constexpr std::size_t kMaxSharedMasks = 256; // cut masks kept per grammar
} // namespace

struct Matcher::State {
  std::shared_ptr<const Grammar> grammar;
  const Grammar::Impl* g = nullptr;
  std::shared_ptr<const text::TokenTable> table;

  struct Node {
    std::int32_t pos = 0, parent = 0, depth = 0;
    bool on_ctx = false; // built on kCtx (a cut stack)
  };
  static constexpr std::int32_t kCtx = 1; // node 1: the unknown rest of a cut stack
  static constexpr std::int32_t kCtxDepth = kMaxDepth / 2; // kCtx's depth (see mask())
  static constexpr std::int32_t kMaxMargin = 2;            // see mask()
  static constexpr std::int32_t kOverflow = -2;            // a cut stack past kMaxDepth: uncertain
  std::unordered_map<std::int32_t, std::shared_ptr<const CutMask>> cut_masks; // by cut state
  std::vector<std::uint8_t> has_ctx;                                          // per set: holds kCtx
  std::vector<Node> nodes; // node 0: the empty stack
  std::unordered_map<std::uint64_t, std::int32_t> node_ids;
  std::vector<std::vector<std::int32_t>> sets; // set 0: no stack (dead)
  std::unordered_map<std::vector<std::int32_t>, std::int32_t, detail::VecHash> set_ids;
  std::vector<std::int32_t> trans; // sets.size() * 256; -1: not computed
  std::unordered_map<std::int32_t, std::vector<std::uint64_t>> masks;
  std::int32_t start = 0, cur = 0;
  std::vector<std::int32_t> walk; // the trie walk's state per depth

  // The node of stack (pos, parent); -1 when it would nest deeper than kMaxDepth.
  std::int32_t node(std::int32_t pos, std::int32_t parent) {
    const std::uint64_t key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(pos)) << 32) |
                              static_cast<std::uint32_t>(parent);
    if (const auto f = node_ids.find(key); f != node_ids.end())
      return f->second;
    const Node& p = nodes[static_cast<std::size_t>(parent)];
    const std::int32_t depth = p.depth + 1;
    if (depth > kMaxDepth)
      return p.on_ctx ? kOverflow : -1;
    const bool on_ctx = p.on_ctx;
    const auto id = static_cast<std::int32_t>(nodes.size());
    nodes.push_back(Node{pos, parent, depth, on_ctx});
    node_ids.emplace(key, id);
    return id;
  }

  // The stacks (tops at bytes elements, or the empty stack) reached from position `pos` with the
  // stack `parent` below it, without consuming a byte.
  void expand(std::int32_t pos, std::int32_t parent, std::vector<std::int32_t>& out) {
    const Elem e = g->code[static_cast<std::size_t>(pos)];
    if (e.kind == Elem::end) {
      if (parent == 0 || parent == kCtx) {
        out.push_back(parent);
        return;
      }
      const Node p = nodes[static_cast<std::size_t>(parent)];
      expand(p.pos, p.parent, out);
      return;
    }
    if (e.kind == Elem::bytes) {
      if (const std::int32_t id = node(pos, parent); id >= 0)
        out.push_back(id);
      else if (id == kOverflow)
        out.push_back(kCtx);
      return;
    }
    // A reference: its return address, unless it is the last element (a tail call).
    const std::int32_t ret = g->code[static_cast<std::size_t>(pos) + 1].kind == Elem::end
                                 ? parent
                                 : node(pos + 1, parent);
    if (ret == kOverflow)
      out.push_back(kCtx);
    if (ret < 0)
      return;
    for (const std::int32_t a : g->alts[static_cast<std::size_t>(e.arg)])
      expand(a, ret, out);
  }

  std::int32_t intern(std::vector<std::int32_t>& stacks) {
    std::sort(stacks.begin(), stacks.end());
    stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
    if (stacks.size() > kMaxStacks)
      throw Error(ErrorKind::unsupported, "grammar",
                  "more than " + std::to_string(kMaxStacks) +
                      " parses at once (the grammar is too ambiguous)");
    if (const auto f = set_ids.find(stacks); f != set_ids.end())
      return f->second;
    const auto id = static_cast<std::int32_t>(sets.size());
    sets.push_back(stacks);
    has_ctx.push_back(std::binary_search(stacks.begin(), stacks.end(), kCtx) ? 1 : 0);
    set_ids.emplace(stacks, id);
    trans.resize(sets.size() * 256, -1);
    return id;
  }

  std::int32_t next(std::int32_t set, std::uint8_t b) {
    const std::size_t slot = static_cast<std::size_t>(set) * 256 + b;
    if (const std::int32_t t = trans[slot]; t >= 0)
      return t;
    std::vector<std::int32_t> out;
    for (const std::int32_t s : sets[static_cast<std::size_t>(set)]) {
      if (s == 0 || s == kCtx)
        continue;
      const Node n = nodes[static_cast<std::size_t>(s)];
      const Elem e = g->code[static_cast<std::size_t>(n.pos)];
      const auto& bits = g->sets[static_cast<std::size_t>(e.arg)];
      if ((bits[b / 64] >> (b % 64)) & 1)
        expand(n.pos + 1, n.parent, out);
    }
    const std::int32_t id = out.empty() ? 0 : intern(out);
    trans[slot] = id;
    return id;
  }

  bool can_end(std::int32_t set) const {
    const auto& v = sets[static_cast<std::size_t>(set)];
    return !v.empty() && v.front() == 0;
  }

  void init() {
    g = &grammar->impl();
    nodes.assign(1, Node{0, 0, 0, false});
    nodes.push_back(Node{-1, 0, kCtxDepth, true}); // kCtx
    sets.assign(1, {});
    has_ctx.assign(1, 0);
    set_ids.emplace(std::vector<std::int32_t>{}, 0);
    trans.assign(256, 0); // the dead set stays dead
    std::vector<std::int32_t> out;
    for (const std::int32_t a : g->alts[static_cast<std::size_t>(g->root)])
      expand(a, 0, out);
    start = cur = out.empty() ? 0 : intern(out);
  }

  // Tokens of the trie whose bytes `set` takes; with `uncertain`, `set` may hold cut stacks: the
  // tokens of a subtree where a parse pops into the context (and that no parse takes within the
  // top frames) go to `uncertain` instead.
  std::vector<std::uint64_t> walk_trie(std::int32_t set, std::vector<std::int32_t>* uncertain) {
    const auto& t = *table;
    std::vector<std::uint64_t> m((t.bytes.size() + 63) / 64, 0);
    if (walk.empty()) {
      std::size_t deepest = 0;
      for (const auto& nd : t.nodes)
        deepest = std::max<std::size_t>(deepest, nd.depth);
      walk.resize(deepest + 1);
    }
    walk[0] = set;
    const auto* tn = t.nodes.data();
    const auto* ids = t.ids.data();
    const auto count = static_cast<std::int32_t>(t.nodes.size());
    std::vector<std::pair<std::int32_t, std::int32_t>> ranges; // uncertain subtrees
    std::int32_t covered = 0;                                  // end of the last range
    for (std::int32_t i = 1; i < count;) {
      const auto& nd = tn[i];
      const std::int32_t from = walk[nd.depth - 1u];
      std::int32_t s = trans[static_cast<std::size_t>(from) * 256 + nd.byte];
      if (s < 0)
        s = next(from, nd.byte);
      if (s == 0) {
        i = nd.end;
        continue;
      }
      if (has_ctx[static_cast<std::size_t>(s)]) {
        if (i >= covered) {
          ranges.emplace_back(i, nd.end);
          covered = nd.end;
        }
        if (sets[static_cast<std::size_t>(s)].size() == 1) { // only the context: all uncertain
          i = nd.end;
          continue;
        }
      }
      walk[nd.depth] = s;
      for (std::int32_t k = nd.first; k < nd.last; ++k) {
        const auto id = static_cast<std::uint32_t>(ids[k]);
        m[id / 64] |= std::uint64_t{1} << (id % 64);
      }
      ++i;
    }
    if (uncertain)
      for (const auto& [a, z] : ranges)
        for (std::int32_t n = a; n < z; ++n)
          for (std::int32_t k = tn[n].first; k < tn[n].last; ++k) {
            const auto id = static_cast<std::uint32_t>(ids[k]);
            if (!((m[id / 64] >> (id % 64)) & 1))
              uncertain->push_back(static_cast<std::int32_t>(id));
          }
    return m;
  }

  // `set` cut `margin` frames under its shallowest top (see the file comment); -1 when that cannot
  // stand for it (a stack deeper than kCtxDepth: the cut stacks must be at least as deep as the
  // real ones, so that the depth bound drops no parse the real state keeps without knowing).
  std::int32_t cut(std::int32_t set, std::int32_t margin) {
    std::int32_t shallowest = kMaxDepth + 1, deepest = 0;
    for (const std::int32_t s : sets[static_cast<std::size_t>(set)])
      if (s != 0) {
        shallowest = std::min(shallowest, nodes[static_cast<std::size_t>(s)].depth);
        deepest = std::max(deepest, nodes[static_cast<std::size_t>(s)].depth);
      }
    if (deepest == 0 || deepest > kCtxDepth)
      return -1;
    shallowest = std::max(1, shallowest - margin);
    std::vector<std::int32_t> out, frames;
    for (const std::int32_t s : sets[static_cast<std::size_t>(set)]) {
      if (s == 0) {
        out.push_back(0);
        continue;
      }
      frames.clear();
      for (std::int32_t f = s; nodes[static_cast<std::size_t>(f)].depth >= shallowest;
           f = nodes[static_cast<std::size_t>(f)].parent)
        frames.push_back(nodes[static_cast<std::size_t>(f)].pos);
      std::int32_t id = kCtx;
      for (auto k = frames.size(); k-- > 0;)
        id = node(frames[k], id); // never past kMaxDepth: at most kCtxDepth frames
      out.push_back(id);
    }
    return intern(out);
  }

  bool takes(std::int32_t set, const std::string& bytes) {
    for (const char c : bytes) {
      set = next(set, static_cast<std::uint8_t>(c));
      if (set == 0)
        return false;
    }
    return true;
  }

  // The cut mask of cut state `c`: from the grammar's shared cache (other matchers of this
  // grammar and table computed it) or walked here and put there.
  std::shared_ptr<const CutMask> shared_cut_mask(std::int32_t c) {
    // The key: each stack as its code positions from the top down (-1: the empty stack), sorted.
    std::vector<std::vector<std::int32_t>> stacks;
    for (const std::int32_t s : sets[static_cast<std::size_t>(c)]) {
      std::vector<std::int32_t> frames;
      if (s == 0)
        frames.push_back(-1);
      for (std::int32_t f = s; f > kCtx; f = nodes[static_cast<std::size_t>(f)].parent)
        frames.push_back(nodes[static_cast<std::size_t>(f)].pos);
      stacks.push_back(std::move(frames));
    }
    std::sort(stacks.begin(), stacks.end());
    std::vector<std::int32_t> key;
    for (const auto& st : stacks) {
      key.insert(key.end(), st.begin(), st.end());
      key.push_back(-2);
    }
    SharedCutMasks& shared = *g->cut_masks;
    {
      const std::lock_guard<std::mutex> lock(shared.mu);
      if (shared.table_address == table.get() && shared.table.lock() == table) {
        if (const auto f = shared.masks.find(key); f != shared.masks.end())
          return f->second;
      }
    }
    auto cm = std::make_shared<CutMask>();
    cm->accepted = walk_trie(c, &cm->uncertain);
    if (cm->uncertain.size() > table->bytes.size() / 32) {
      *cm = CutMask{};
      cm->too_uncertain = true;
    }
    const std::lock_guard<std::mutex> lock(shared.mu);
    if (shared.table_address != table.get() || shared.table.lock() != table) {
      shared.masks.clear(); // masks of another (or a freed) token table
      shared.table = table;
      shared.table_address = table.get();
    }
    if (shared.masks.size() >= kMaxSharedMasks)
      shared.masks.clear();
    shared.masks.emplace(std::move(key), cm);
    return cm;
  }

  const std::vector<std::uint64_t>& mask(std::int32_t set) {
    if (const auto f = masks.find(set); f != masks.end())
      return f->second;
    if (masks.size() >= kMaxCachedMasks)
      masks.clear();
    // The shallowest cut whose uncertain tokens are few: a stack at the shallowest depth may
    // finish a small rule (an optional space) and go on in the frame under it (the value after
    // it), which a cut one frame deeper keeps.
    for (std::int32_t margin = 0; margin <= kMaxMargin; ++margin) {
      const std::int32_t c = cut(set, margin);
      if (c < 0)
        break;
      auto f = cut_masks.find(c);
      if (f == cut_masks.end()) {
        if (cut_masks.size() >= kMaxCachedMasks)
          cut_masks.clear();
        f = cut_masks.emplace(c, shared_cut_mask(c)).first;
      }
      const CutMask& cm = *f->second;
      if (cm.too_uncertain)
        continue;
      std::vector<std::uint64_t> m = cm.accepted;
      for (const std::int32_t id : cm.uncertain)
        if (takes(set, table->bytes[static_cast<std::size_t>(id)]))
          m[static_cast<std::size_t>(id) / 64] |= std::uint64_t{1} << (id % 64);
      return masks.emplace(set, std::move(m)).first->second;
    }
    std::vector<std::uint64_t> m = walk_trie(set, nullptr);
    return masks.emplace(set, std::move(m)).first->second;
  }
};

Matcher::Matcher(std::shared_ptr<const Grammar> grammar,
                 std::shared_ptr<const text::TokenTable> table)
    : s_(std::make_unique<State>()) {
  if (!grammar)
    throw Error(ErrorKind::invalid_input, "grammar", "a matcher of a null grammar");
  s_->grammar = std::move(grammar);
  s_->table = std::move(table);
  s_->init();
}

Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

bool Matcher::accept_bytes(std::string_view bytes) {
  std::int32_t s = s_->cur;
  for (const char c : bytes) {
    s = s_->next(s, static_cast<std::uint8_t>(c));
    if (s == 0)
      return false;
  }
  s_->cur = s;
  return true;
}

bool Matcher::accept_token(std::int32_t id) {
  check(s_->table != nullptr, ErrorKind::internal, "grammar", "a matcher without a token table");
  const auto& t = *s_->table;
  if (id < 0 || static_cast<std::size_t>(id) >= t.bytes.size() ||
      t.special[static_cast<std::size_t>(id)] || t.bytes[static_cast<std::size_t>(id)].empty())
    return false;
  return accept_bytes(t.bytes[static_cast<std::size_t>(id)]);
}

bool Matcher::can_end() const {
  return s_->can_end(s_->cur);
}

bool Matcher::is_complete() const {
  const auto& v = s_->sets[static_cast<std::size_t>(s_->cur)];
  return v.size() == 1 && v.front() == 0;
}

void Matcher::fill_mask(std::vector<std::uint64_t>& allowed) {
  check(s_->table != nullptr, ErrorKind::internal, "grammar", "a matcher without a token table");
  allowed = s_->mask(s_->cur);
}

void Matcher::reset() {
  s_->cur = s_->start;
}

} // namespace tpullm::grammar
