// Matcher: a byte-level pushdown matcher over the compiled grammar (grammar_impl.hpp).
//
// A parse is a stack of positions in the compiled code (the top one at a bytes element, the
// ones below it return addresses); stacks are hash-consed into nodes (position, parent), so a
// stack is one id and equal stacks are the same id. The matcher's state is the set of its
// stacks, interned too: a state is one id, and the byte transitions between states are memoised
// in a table (a DFA built lazily). The token mask walks the tokenizer's trie (text::TokenTable)
// in preorder through that table, skipping the subtree of a byte no stack takes, and is cached
// per state.
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
constexpr std::size_t kMaxCachedMasks = 512; // masks kept per matcher (~19 KiB each at 152k)
} // namespace

struct Matcher::State {
  std::shared_ptr<const Grammar> grammar;
  const Grammar::Impl* g = nullptr;
  std::shared_ptr<const text::TokenTable> table;

  struct Node {
    std::int32_t pos = 0, parent = 0, depth = 0;
  };
  std::vector<Node> nodes; // node 0: the empty stack
  std::unordered_map<std::uint64_t, std::int32_t> node_ids;
  std::vector<std::vector<std::int32_t>> sets; // set 0: no stack (dead)
  std::unordered_map<std::vector<std::int32_t>, std::int32_t, detail::VecHash> set_ids;
  std::vector<std::int32_t> trans; // sets.size() * 256; -1: not computed
  std::unordered_map<std::int32_t, std::vector<std::uint64_t>> masks;
  std::int32_t start = 0, cur = 0;
  std::vector<std::int32_t> scratch;
  std::vector<std::int32_t> walk; // the trie walk's state per depth

  // The node of stack (pos, parent); -1 when it would nest deeper than kMaxDepth.
  std::int32_t node(std::int32_t pos, std::int32_t parent) {
    const std::uint64_t key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(pos)) << 32) |
                              static_cast<std::uint32_t>(parent);
    if (const auto f = node_ids.find(key); f != node_ids.end())
      return f->second;
    const std::int32_t depth = nodes[static_cast<std::size_t>(parent)].depth + 1;
    if (depth > kMaxDepth)
      return -1;
    const auto id = static_cast<std::int32_t>(nodes.size());
    nodes.push_back(Node{pos, parent, depth});
    node_ids.emplace(key, id);
    return id;
  }

  // The stacks (tops at bytes elements, or the empty stack) reached from position `pos` with the
  // stack `parent` below it, without consuming a byte.
  void expand(std::int32_t pos, std::int32_t parent, std::vector<std::int32_t>& out) {
    const Elem e = g->code[static_cast<std::size_t>(pos)];
    if (e.kind == Elem::end) {
      if (parent == 0) {
        out.push_back(0);
        return;
      }
      const Node p = nodes[static_cast<std::size_t>(parent)];
      expand(p.pos, p.parent, out);
      return;
    }
    if (e.kind == Elem::bytes) {
      if (const std::int32_t id = node(pos, parent); id >= 0)
        out.push_back(id);
      return;
    }
    // A reference: its return address, unless it is the last element (a tail call).
    const std::int32_t ret = g->code[static_cast<std::size_t>(pos) + 1].kind == Elem::end
                                 ? parent
                                 : node(pos + 1, parent);
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
      if (s == 0)
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
    nodes.assign(1, Node{0, 0, 0});
    sets.assign(1, {});
    set_ids.emplace(std::vector<std::int32_t>{}, 0);
    trans.assign(256, 0); // the dead set stays dead
    std::vector<std::int32_t> out;
    for (const std::int32_t a : g->alts[static_cast<std::size_t>(g->root)])
      expand(a, 0, out);
    start = cur = out.empty() ? 0 : intern(out);
  }

  const std::vector<std::uint64_t>& mask(std::int32_t set) {
    if (const auto f = masks.find(set); f != masks.end())
      return f->second;
    if (masks.size() >= kMaxCachedMasks)
      masks.clear();
    const auto& t = *table;
    std::vector<std::uint64_t> m((t.bytes.size() + 63) / 64, 0);
    walk.assign(1, set);
    const auto* nodes_ = t.nodes.data();
    const auto count = static_cast<std::int32_t>(t.nodes.size());
    for (std::int32_t i = 1; i < count;) {
      const auto& nd = nodes_[i];
      const std::int32_t s = next(walk[nd.depth - 1u], nd.byte);
      if (s == 0) {
        i = nd.end;
        continue;
      }
      if (walk.size() <= nd.depth)
        walk.resize(nd.depth + 1u);
      walk[nd.depth] = s;
      for (std::int32_t k = nd.first; k < nd.last; ++k) {
        const auto id = static_cast<std::uint32_t>(t.ids[static_cast<std::size_t>(k)]);
        m[id / 64] |= std::uint64_t{1} << (id % 64);
      }
      ++i;
    }
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
