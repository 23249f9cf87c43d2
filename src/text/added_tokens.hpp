#pragma once
// Added tokens of tokenizer.json (special or not, with lstrip / rstrip / single_word /
// normalized): found inside the text leftmost-longest, as HF's AddedVocabulary does, the
// non-normalized ones in the raw text, the normalized ones in the normalized text.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "json_fields.hpp"
#include "normalizer.hpp"

namespace tpullm::text::detail {

/// One entry of "added_tokens".
struct AddedToken {
  std::int32_t id = 0;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

/// A piece of text: [begin, end) bytes, and the added token it is (-1 = ordinary text).
struct Segment {
  std::size_t begin, end;
  std::int32_t id;
};

/// A byte trie of token contents, searched leftmost-longest.
class TokenTrie {
public:
  /// Adds `content` for token `index` (into the owner's list).
  void add(std::string_view content, std::int32_t index);
  /// The (begin, end, index) of the leftmost-longest match at or after `from`; index -1 if none.
  void find(std::string_view s, std::size_t from, std::size_t& begin, std::size_t& end,
            std::int32_t& index) const;
  bool empty() const { return nodes_.size() <= 1; }

private:
  struct Node {
    std::int32_t token = -1;
    std::vector<std::pair<unsigned char, std::int32_t>> kids;
  };
  std::int32_t child(std::int32_t node, unsigned char c) const;
  std::vector<Node> nodes_{Node{}};
  bool first_byte_[256] = {};
};

/// The added vocabulary.
class AddedVocab {
public:
  /// Parses "added_tokens"; `normalizer` normalizes the contents of normalized tokens.
  AddedVocab(const json& list, const Normalizer& normalizer);
  /// Cuts `s` at the added tokens of one set (normalized or not), with their strip flags.
  void split(std::string_view s, bool normalized_set, std::vector<Segment>& out) const;
  /// The tokens in file order.
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  /// The added token with `id`, or null.
  const AddedToken* by_id(std::int32_t id) const;
  /// The added token whose content is `content`, or null.
  const AddedToken* by_content(std::string_view content) const;

private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<std::int32_t, std::size_t> by_id_;
  std::unordered_map<std::string, std::size_t> by_content_;
  TokenTrie raw_, normalized_;
};

} // namespace tpullm::text::detail
