// The BPE model: see bpe.hpp.
#include "bpe.hpp"

#include <cstdio>
#include <mutex>
#include <queue>

#include "unicode.hpp"

namespace tpullm::text::detail {
namespace {

constexpr std::size_t kCacheWords = 1 << 18; // the cache stops growing here
constexpr std::size_t kCacheMaxBytes = 256;  // longer words are not cached

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}

std::optional<std::string> opt_string(const json& j, const char* key) {
  const json& v = member(j, key);
  if (v.is_null())
    return std::nullopt;
  if (!v.is_string())
    bad_field(std::string("model.") + key, "expected a string or null");
  return v.get<std::string>();
}

} // namespace

BpeModel::BpeModel(const json& model) {
  const std::string type = type_of(model, "model");
  if (type != "BPE")
    unsupported_type("model", type);
  const json& dropout = member(model, "dropout");
  if (!dropout.is_null() && !(dropout.is_number() && dropout.get<double>() == 0.0))
    throw_error(ErrorKind::unsupported, std::string(kFile), "model.dropout ", dropout.dump(),
                " is not supported (only null)");
  const json& vocab = member(model, "vocab");
  if (!vocab.is_object())
    bad_field("model.vocab", "expected an object of token -> id");
  vocab_.reserve(vocab.size());
  std::int64_t max_id = -1;
  for (const auto& [tok, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
        id.get<std::int64_t>() > INT32_MAX - 1)
      bad_field("model.vocab", "the id of '" + tok + "' is not an integer in [0, 2^31-1)");
    const auto i = static_cast<std::int32_t>(id.get<std::int64_t>());
    vocab_[tok] = i;
    max_id = std::max<std::int64_t>(max_id, i);
  }
  if (max_id >= (1 << 26))
    bad_field("model.vocab", "ids beyond 2^26 are not supported");
  tokens_.assign(static_cast<std::size_t>(max_id + 1), std::string());
  has_token_.assign(tokens_.size(), false);
  for (const auto& [tok, id] : vocab_) {
    tokens_[static_cast<std::size_t>(id)] = tok;
    has_token_[static_cast<std::size_t>(id)] = true;
  }
  if (const auto unk = opt_string(model, "unk_token")) {
    const auto it = vocab_.find(*unk);
    if (it == vocab_.end())
      bad_field("model.unk_token", "'" + *unk + "' is not in the vocab");
    unk_ = it->second;
  }
  prefix_ = opt_string(model, "continuing_subword_prefix").value_or("");
  suffix_ = opt_string(model, "end_of_word_suffix").value_or("");
  fuse_unk_ = bool_field(model, "fuse_unk", "model", false);
  byte_fallback_ = bool_field(model, "byte_fallback", "model", false);
  ignore_merges_ = bool_field(model, "ignore_merges", "model", false);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const auto it = vocab_.find(std::string_view(name));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }

  const json& merges = member(model, "merges");
  if (!merges.is_array())
    bad_field("model.merges", "expected a list");
  merges_.reserve(merges.size());
  const auto id_of = [&](std::string_view t, std::size_t rank) {
    const auto it = vocab_.find(t);
    if (it == vocab_.end())
      bad_field("model.merges[" + std::to_string(rank) + "]",
                "names '" + std::string(t) + "', which is not in the vocab");
    return it->second;
  };
  std::string merged;
  for (std::size_t r = 0; r < merges.size(); ++r) {
    const json& m = merges[r];
    std::string_view a, b;
    std::string line;
    if (m.is_string()) {
      line = m.get<std::string>();
      const std::size_t sp = line.find(' ');
      if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
        bad_field("model.merges[" + std::to_string(r) + "]", "expected \"a b\"");
      a = std::string_view(line).substr(0, sp);
      b = std::string_view(line).substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get_ref<const std::string&>();
      b = m[1].get_ref<const std::string&>();
    } else {
      bad_field("model.merges[" + std::to_string(r) + "]", "expected \"a b\" or [\"a\", \"b\"]");
    }
    const std::int32_t ia = id_of(a, r), ib = id_of(b, r);
    if (!prefix_.empty() && b.substr(0, prefix_.size()) == prefix_)
      b.remove_prefix(prefix_.size());
    merged.assign(a);
    merged.append(b);
    merges_[pair_key(ia, ib)] = {static_cast<std::uint32_t>(r), id_of(merged, r)};
  }
}

std::optional<std::int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end())
    return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(std::int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size() ||
      !has_token_[static_cast<std::size_t>(id)])
    return nullptr;
  return &tokens_[static_cast<std::size_t>(id)];
}

void BpeModel::encode(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.empty())
    return;
  if (ignore_merges_) {
    const auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheMaxBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mutex_);
    const auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::unique_lock lock(cache_mutex_);
    if (cache_.size() < kCacheWords)
      cache_.try_emplace(std::string(word), out.begin() + static_cast<std::ptrdiff_t>(first),
                         out.end());
  }
}

void BpeModel::merge_word(std::string_view w, std::vector<std::int32_t>& out) const {
  struct Symbol {
    std::int32_t id;
    int prev, next;
    bool live;
  };
  std::vector<Symbol> sym;
  sym.reserve(w.size());
  const auto add = [&](std::int32_t id) {
    const int n = static_cast<int>(sym.size());
    sym.push_back({id, n - 1, n + 1, true});
  };
  std::int32_t pending_unk = -1; // an unk not yet added (fused while fuse_unk)
  std::string s;
  for (std::size_t i = 0; i < w.size();) {
    const std::size_t len = std::min(utf8_len(static_cast<unsigned char>(w[i])), w.size() - i);
    const bool first = i == 0, last = i + len == w.size();
    std::string_view piece = w.substr(i, len);
    if ((!first && !prefix_.empty()) || (last && !suffix_.empty())) {
      s.assign(first ? "" : prefix_);
      s.append(piece);
      if (last)
        s.append(suffix_);
      piece = s;
    }
    i += len;
    if (const auto it = vocab_.find(piece); it != vocab_.end()) {
      if (pending_unk >= 0)
        add(pending_unk), pending_unk = -1;
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char c : piece)
        all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        if (pending_unk >= 0)
          add(pending_unk), pending_unk = -1;
        for (const char c : piece)
          add(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_) {
      if (pending_unk >= 0 && !fuse_unk_)
        add(pending_unk);
      pending_unk = *unk_;
    }
  }
  if (pending_unk >= 0)
    add(pending_unk);
  if (sym.empty())
    return;
  sym.back().next = -1;

  struct Merge {
    std::uint32_t rank;
    int pos;
    std::int32_t id;
    bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Merge, std::vector<Merge>, std::greater<Merge>> queue;
  const auto lookup = [&](std::int32_t a,
                          std::int32_t b) -> const std::pair<std::uint32_t, std::int32_t>* {
    const auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (std::size_t k = 0; k + 1 < sym.size(); ++k)
    if (const auto* m = lookup(sym[k].id, sym[k + 1].id))
      queue.push({m->first, static_cast<int>(k), m->second});
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& cur = sym[static_cast<std::size_t>(top.pos)];
    if (!cur.live || cur.next < 0)
      continue;
    Symbol& right = sym[static_cast<std::size_t>(cur.next)];
    const auto* m = lookup(cur.id, right.id);
    if (m == nullptr || m->second != top.id)
      continue; // stale entry
    cur.id = top.id;
    right.live = false;
    cur.next = right.next;
    if (cur.next >= 0)
      sym[static_cast<std::size_t>(cur.next)].prev = top.pos;
    if (cur.prev >= 0)
      if (const auto* pm = lookup(sym[static_cast<std::size_t>(cur.prev)].id, cur.id))
        queue.push({pm->first, cur.prev, pm->second});
    if (cur.next >= 0)
      if (const auto* nm = lookup(cur.id, sym[static_cast<std::size_t>(cur.next)].id))
        queue.push({nm->first, top.pos, nm->second});
  }
  for (const Symbol& x : sym)
    if (x.live)
      out.push_back(x.id);
}

} // namespace tpullm::text::detail
