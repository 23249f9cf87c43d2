// Added tokens: see added_tokens.hpp.
#include "added_tokens.hpp"

#include "unicode.hpp"

namespace tpullm::text::detail {
namespace {

// Rust's char::is_alphanumeric / is_whitespace, approximated on the code point's class through
// PCRE2-free checks: ASCII exactly, other code points as word characters unless whitespace.
bool is_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}
bool is_word(char32_t c) {
  if (c < 0x80)
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return !is_space(c);
}
char32_t last_char(std::string_view s) {
  std::size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80)
    --i;
  if (i > 0)
    --i;
  return next_code_point(s, i);
}
std::size_t trim_end_len(std::string_view s) {
  std::size_t n = s.size();
  while (n > 0) {
    std::size_t i = n - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80)
      --i;
    std::size_t j = i;
    if (!is_space(next_code_point(s, j)))
      break;
    n = i;
  }
  return n;
}
std::size_t trim_start_len(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = i;
    if (!is_space(next_code_point(s, j)))
      break;
    i = j;
  }
  return i;
}

} // namespace

std::int32_t TokenTrie::child(std::int32_t node, unsigned char c) const {
  for (const auto& [k, n] : nodes_[static_cast<std::size_t>(node)].kids)
    if (k == c)
      return n;
  return -1;
}

void TokenTrie::add(std::string_view content, std::int32_t index) {
  if (content.empty())
    return;
  std::int32_t node = 0;
  for (const char ch : content) {
    const auto c = static_cast<unsigned char>(ch);
    std::int32_t next = child(node, c);
    if (next < 0) {
      next = static_cast<std::int32_t>(nodes_.size());
      nodes_[static_cast<std::size_t>(node)].kids.emplace_back(c, next);
      nodes_.emplace_back();
    }
    node = next;
  }
  if (nodes_[static_cast<std::size_t>(node)].token < 0)
    nodes_[static_cast<std::size_t>(node)].token = index;
  first_byte_[static_cast<unsigned char>(content[0])] = true;
}

void TokenTrie::find(std::string_view s, std::size_t from, std::size_t& begin, std::size_t& end,
                     std::int32_t& index) const {
  index = -1;
  for (std::size_t i = from; i < s.size(); ++i) {
    if (!first_byte_[static_cast<unsigned char>(s[i])])
      continue;
    std::int32_t node = 0;
    for (std::size_t k = i; k < s.size(); ++k) {
      node = child(node, static_cast<unsigned char>(s[k]));
      if (node < 0)
        break;
      if (nodes_[static_cast<std::size_t>(node)].token >= 0) {
        index = nodes_[static_cast<std::size_t>(node)].token;
        begin = i;
        end = k + 1;
      }
    }
    if (index >= 0)
      return;
  }
}

AddedVocab::AddedVocab(const json& list, const Normalizer& normalizer) {
  if (list.is_null())
    return;
  if (!list.is_array())
    bad_field("added_tokens", "expected a list");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object())
      bad_field(path, "expected an object");
    AddedToken a;
    const json& id = member(t, "id");
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
        id.get<std::int64_t>() >= (1 << 26))
      bad_field(path + ".id", "expected an integer in [0, 2^26)");
    a.id = static_cast<std::int32_t>(id.get<std::int64_t>());
    a.content = sanitize_utf8(str_field(t, "content", path));
    a.special = bool_field(t, "special", path, false);
    a.lstrip = bool_field(t, "lstrip", path, false);
    a.rstrip = bool_field(t, "rstrip", path, false);
    a.single_word = bool_field(t, "single_word", path, false);
    a.normalized = bool_field(t, "normalized", path, !a.special);
    const std::size_t k = tokens_.size();
    by_id_[a.id] = k;
    by_content_[a.content] = k;
    tokens_.push_back(std::move(a));
  }
  for (std::size_t k = 0; k < tokens_.size(); ++k) {
    const AddedToken& a = tokens_[k];
    if (a.normalized)
      normalized_.add(normalizer.apply(a.content), static_cast<std::int32_t>(k));
    else
      raw_.add(a.content, static_cast<std::int32_t>(k));
  }
}

const AddedToken* AddedVocab::by_id(std::int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocab::by_content(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocab::split(std::string_view s, bool normalized_set, std::vector<Segment>& out) const {
  const TokenTrie& trie = normalized_set ? normalized_ : raw_;
  std::size_t start = 0;
  if (!trie.empty()) {
    std::size_t pos = 0, b = 0, e = 0;
    std::int32_t idx = -1;
    while (pos < s.size()) {
      trie.find(s, pos, b, e, idx);
      if (idx < 0)
        break;
      pos = e;
      const AddedToken& a = tokens_[static_cast<std::size_t>(idx)];
      if (a.single_word) {
        const bool space_before = b == 0 || !is_word(last_char(s.substr(0, b)));
        std::size_t j = e;
        const bool space_after = e == s.size() || !is_word(next_code_point(s, j));
        if (!space_before || !space_after)
          continue;
      }
      if (a.lstrip)
        b = std::max(trim_end_len(s.substr(0, b)), start);
      if (a.rstrip)
        e += trim_start_len(s.substr(e));
      if (b > start)
        out.push_back({start, b, -1});
      out.push_back({b, e, a.id});
      start = e;
      pos = std::max(pos, e);
    }
  }
  if (start < s.size() || s.empty())
    out.push_back({start, s.size(), -1});
}

} // namespace tpullm::text::detail
