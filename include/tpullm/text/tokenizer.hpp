#pragma once
/// A HuggingFace `tokenizer.json` tokenizer (byte-level BPE and SentencePiece-style BPE with byte
/// fallback), byte-exact to HuggingFace `tokenizers` on ids and decoded text for the pieces it
/// supports (docs/text.md). Anything else in a tokenizer.json is refused by name
/// (Error(unsupported)); malformed files are Error(invalid_input). Text in is UTF-8: each byte
/// that is not part of a valid UTF-8 sequence is read as U+FFFD.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tpullm::text {

/// Special-token strings and flags read from tokenizer_config.json (+ generation_config.json).
struct TokenizerConfig {
  /// Special-token contents; "" when absent (written as AddedToken objects or plain strings).
  std::string bos_token, eos_token, pad_token, unk_token;
  /// add_bos_token / add_eos_token as written in tokenizer_config.json (unset when absent).
  std::optional<bool> add_bos_token, add_eos_token;
  /// The default chat template ("" when none); of a list of named templates, the one named
  /// "default".
  std::string chat_template;
  /// Every named template when the config holds a list of them (else empty). Of a list, only
  /// the one named "default" is rendered (as transformers' apply_chat_template without a
  /// template name); a list without it leaves chat_template empty.
  std::map<std::string, std::string> named_chat_templates;
  /// Why chat_template is empty, for a refusal: tokenizer_config.json has no chat_template, or
  /// its list of named templates (named in the text) has none named "default".
  std::string no_chat_template_reason() const;
  /// generation_config.json's eos_token_id (an int or a list), else the id of eos_token.
  std::vector<std::int32_t> eos_token_ids;
  /// generation_config.json's bos_token_id, else the id of bos_token (unset when neither).
  std::optional<std::int32_t> bos_token_id;
  /// generation_config.json's sampling fields (temperature, top_p, top_k, repetition_penalty,
  /// do_sample) that are present, or {}.
  nlohmann::json generation_defaults = nlohmann::json::object();
  /// tokenizer_config.json's clean_up_tokenization_spaces (recorded; decode does not apply it,
  /// as the Rust tokenizer does not).
  bool clean_up_tokenization_spaces = false;
};

/// Every token's bytes, built once per tokenizer (Tokenizer::token_table) for masks over the
/// vocabulary (grammar-constrained decoding, include/tpullm/grammar/grammar.hpp).
struct TokenTable {
  /// token_bytes(id) for every id below vocab_size ("" for an id with no token).
  std::vector<std::string> bytes;
  /// 1 for an added token marked special (never part of a grammar's text), else 0.
  std::vector<std::uint8_t> special;
  /// One node of the trie of the non-special, non-empty byte strings, stored in depth-first
  /// preorder: a node's subtree is the nodes [its index, end).
  struct Node {
    std::uint8_t byte = 0;   ///< the byte that leads to this node from its parent
    std::uint16_t depth = 0; ///< bytes from the root (the root, node 0, has depth 0)
    std::int32_t end = 0;    ///< one past the last node of this node's subtree
    std::int32_t first = 0;  ///< tokens whose bytes end here: ids[first, last)
    std::int32_t last = 0;   ///< see first
  };
  /// The trie (node 0 is the root, the empty string, with no token).
  std::vector<Node> nodes;
  /// Token ids grouped by node (see Node::first).
  std::vector<std::int32_t> ids;
  /// The table of `bytes` and `special` (builds the trie); longer byte strings than 65535 bytes
  /// are left out of the trie.
  static TokenTable build(std::vector<std::string> bytes, std::vector<std::uint8_t> special);
};

/// The tokenizer: normalizer -> pre-tokenizer -> BPE model -> post-processor for encode,
/// decoder for decode, with added tokens matched inside the text before the normalizer.
/// Immutable after loading; encode/decode are safe to call from several threads.
class Tokenizer {
public:
  /// Reads DIR/tokenizer.json (required), DIR/tokenizer_config.json and
  /// DIR/generation_config.json (optional).
  static Tokenizer from_dir(const std::filesystem::path& dir);
  /// From the files' contents (config texts may be empty).
  static Tokenizer from_json(std::string_view tokenizer_json,
                             std::string_view tokenizer_config_json = {},
                             std::string_view generation_config_json = {});

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// The ids of `text` (UTF-8; bad bytes read as U+FFFD); add_special_tokens applies the
  /// post-processor's special tokens (HF's add_special_tokens=True).
  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  /// The text of `ids` through the decoder; ids outside the vocabulary are skipped (as HF does);
  /// skip_special_tokens leaves out the added tokens marked special.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const;
  /// The vocab strings of ids (HF's convert_ids_to_tokens); "" for an id with no token.
  std::vector<std::string> pieces(std::span<const std::int32_t> ids) const;
  /// The id of a vocab string or added token, if any.
  std::optional<std::int32_t> token_to_id(std::string_view piece) const;
  /// The raw bytes token `id` contributes in the middle of a text: the decoder's steps on this
  /// token alone without the lossy UTF-8 step and without Strip (byte-level characters mapped
  /// back to bytes, SentencePiece's U+2581 as a space, <0xNN> as the byte NN). An added token
  /// gives its content; "" for an id with no token. For ids of a text, decode(ids) is the
  /// concatenation of their token_bytes when that is valid UTF-8, apart from a leading space
  /// that a Strip decoder removes.
  std::string token_bytes(std::int32_t id) const;
  /// Every token's bytes and the trie over them, built on the first call and then shared (the
  /// table lives as long as a holder of the pointer; safe to call from several threads).
  std::shared_ptr<const TokenTable> token_table() const;
  /// Max id + 1 over the vocab and the added tokens.
  std::int64_t vocab_size() const;
  /// Whether `id` is an added token marked special.
  bool is_special(std::int32_t id) const;
  /// Special tokens, chat template and generation defaults.
  const TokenizerConfig& config() const;

  /// The raw tokenizer.json text it was built from (so a bundle can store and rebuild it).
  const std::string& tokenizer_json() const;
  /// The raw tokenizer_config.json text ("" when none).
  const std::string& tokenizer_config_json() const;
  /// The raw generation_config.json text ("" when none).
  const std::string& generation_config_json() const;

  /// The loaded pipeline (src/text/tokenizer_impl.hpp).
  struct Impl;

private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace tpullm::text
