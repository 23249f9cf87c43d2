#pragma once
// The BPE model of tokenizer.json: vocab, merges (as "a b" strings or ["a", "b"] pairs), a
// merge-rank priority queue per word, ignore_merges, byte_fallback, unk (fused or not),
// continuing_subword_prefix / end_of_word_suffix, and a word -> ids cache.
#include <cstdint>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "json_fields.hpp"

namespace tpullm::text::detail {

/// Hash of strings usable with string_view keys (heterogeneous lookup).
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
/// A string -> id map looked up by string_view.
using Vocab = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

/// A BPE model.
class BpeModel {
public:
  /// Parses tokenizer.json's "model" (type BPE; others are Error(unsupported)); merges naming
  /// tokens not in the vocab are Error(invalid_input).
  explicit BpeModel(const json& model);

  /// Appends the ids of one pre-tokenized piece.
  void encode(std::string_view word, std::vector<std::int32_t>& out) const;
  /// The vocab id of `token`, if any.
  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  /// The vocab string of `id`, or null when it has none.
  const std::string* id_to_token(std::int32_t id) const;
  /// Max vocab id + 1.
  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }

private:
  void merge_word(std::string_view word, std::vector<std::int32_t>& out) const;

  Vocab vocab_;
  std::vector<std::string> tokens_; ///< id -> token ("" where no token has the id)
  std::vector<bool> has_token_;     ///< id -> whether a token has it
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::int32_t>>
      merges_; ///< (a,b) -> (rank, merged id)
  std::optional<std::int32_t> unk_;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::int32_t byte_ids_[256]; ///< <0xNN> ids for byte_fallback (-1 when missing)

  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>, StringHash, std::equal_to<>>
      cache_;
};

} // namespace tpullm::text::detail
