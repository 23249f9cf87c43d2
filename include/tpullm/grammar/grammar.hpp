#pragma once
/// Grammar-constrained decoding (docs/grammar.md): a Grammar (from the grammar text format, from
/// a JSON Schema subset, or any JSON object) and a Matcher that follows the bytes generated so
/// far and masks the tokens that would leave the grammar's language.
///
/// A Grammar is immutable and shareable across threads. A Matcher is one answer's state (not
/// thread-safe); it works on bytes, so a token may end inside a UTF-8 character.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tpullm::text {
struct TokenTable;
} // namespace tpullm::text

namespace tpullm::grammar {

/// Immutable rules, shareable across threads (built by the functions below).
class Grammar {
public:
  /// The compiled rules (src/grammar/grammar_impl.hpp).
  struct Impl;
  /// Takes the compiled rules.
  explicit Grammar(std::unique_ptr<const Impl> impl);
  ~Grammar();
  Grammar(const Grammar&) = delete;
  Grammar& operator=(const Grammar&) = delete;
  /// The rules in the grammar text format (what parse_grammar reads back to the same language).
  std::string text() const;
  /// The compiled rules.
  const Impl& impl() const { return *impl_; }

private:
  std::unique_ptr<const Impl> impl_;
};

/// Parses the grammar text format (docs/grammar.md); Error(invalid_input) "grammar: line L col C:
/// ..." on bad text; left recursion and repetitions of what can be empty are refused by name.
std::shared_ptr<const Grammar> parse_grammar(std::string_view text);
/// JSON Schema subset -> grammar (compact JSON: no whitespace between tokens is required; at most
/// one optional space after '{', '[', ':' and ',' and before '}' and ']'). Error(unsupported,
/// "json schema: 'keyword' is not supported at /path") for what is outside the subset;
/// Error(invalid_input) for a malformed schema.
std::shared_ptr<const Grammar> grammar_from_json_schema(const nlohmann::json& schema);
/// Any JSON object (OpenAI's {"type":"json_object"}).
std::shared_ptr<const Grammar> json_object_grammar();
/// Literal `prefix`, then `inner`, then literal `suffix` (tool calls: "<tool_call>\n" + arguments
/// + "\n</tool_call>").
std::shared_ptr<const Grammar> wrap(std::string prefix, std::shared_ptr<const Grammar> inner,
                                    std::string suffix);

/// The most stacks (alternative parses) a Matcher follows at once; more is Error(unsupported).
inline constexpr std::size_t kMaxStacks = 1024;
/// The deepest nesting of rules a Matcher follows; a parse that would nest deeper is dropped (so
/// the mask refuses the token that would open it).
inline constexpr int kMaxDepth = 256;

/// One answer's position in a grammar: the bytes accepted so far are a prefix of the language.
class Matcher {
public:
  /// At the start of the grammar's language. `table` (from text::Tokenizer::token_table) is
  /// needed by the token calls (accept_token, fill_mask); null: bytes only.
  explicit Matcher(std::shared_ptr<const Grammar> grammar,
                   std::shared_ptr<const text::TokenTable> table = nullptr);
  ~Matcher();
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;

  /// Advances over `bytes` if they keep the text a prefix of the language and returns true;
  /// else returns false and the state is unchanged.
  bool accept_bytes(std::string_view bytes);
  /// accept_bytes of the token's bytes; false for a special token or an id outside the table.
  bool accept_token(std::int32_t id);
  /// True when the text so far is a whole sentence of the language (the answer may end here).
  bool can_end() const;
  /// True when no byte can extend the text (the answer must end here).
  bool is_complete() const;
  /// Sets bit `id` of `allowed` (one bit per token id, 64 per word, resized to the table's
  /// vocabulary) exactly for the tokens accept_token would take now; special tokens are never
  /// set (the caller decides about the end of turn through can_end()).
  void fill_mask(std::vector<std::uint64_t>& allowed);
  /// Back to the start of the language (the caches are kept).
  void reset();

  /// The matcher's state (src/grammar/matcher.cpp).
  struct State;

private:
  std::unique_ptr<State> s_;
};

} // namespace tpullm::grammar
