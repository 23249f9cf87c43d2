#pragma once
// The rules behind grammar::Grammar: rules over Unicode code points (what the text format and
// the JSON Schema converter build) and their compiled byte-level form (what Matcher runs).
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tpullm/grammar/grammar.hpp"

namespace tpullm::grammar {

/// A set of code points: sorted, disjoint, non-adjacent inclusive ranges.
using Ranges = std::vector<std::pair<char32_t, char32_t>>;

/// One element of a sequence: a character class or a reference to a rule.
struct Item {
  int rule = -1; ///< >= 0: a reference to rules[rule]
  Ranges chars;  ///< else: one code point of this set
};

/// A named rule: alternatives, each a sequence of items (an empty sequence matches "").
struct Rule {
  std::string name;
  std::vector<std::vector<Item>> alts;
  /// Non-empty for a rule made for a repetition (x* or x{m,n}) inside rule `repeat_of`.
  std::string repeat_of;
};

/// One compiled element.
struct Elem {
  enum Kind : std::uint8_t { bytes, ref, end };
  Kind kind = end;
  std::int32_t arg = 0; ///< bytes: index into Impl::sets; ref: compiled rule id
};

/// The token mask of a cut state (src/grammar/matcher.cpp).
struct CutMask {
  std::vector<std::uint64_t> accepted; ///< tokens decided within the top frames
  std::vector<std::int32_t> uncertain; ///< tokens popping into the context: checked per state
  bool too_uncertain = false;          ///< more uncertain tokens than worth it: cut deeper
};

/// Cut masks shared by every Matcher of one grammar (for one token table at a time): keyed by
/// the cut state's stacks written as code positions, which mean the same in every matcher.
struct SharedCutMasks {
  std::mutex mu;
  std::weak_ptr<const text::TokenTable> table; ///< the table the masks are for
  const text::TokenTable* table_address = nullptr;
  std::map<std::vector<std::int32_t>, std::shared_ptr<const CutMask>> masks;
};

/// The compiled grammar.
struct Grammar::Impl {
  std::vector<Rule> rules; ///< as built (code points)
  int root = 0;            ///< index of the start rule in rules
  /// Byte-level code: sequences of bytes/ref elements, each ended by an end element.
  std::vector<Elem> code;
  /// Byte sets of the bytes elements (bit b of word b/64).
  std::vector<std::array<std::uint64_t, 4>> sets;
  /// Per compiled rule (rules first, then the UTF-8 helpers): where its alternatives start.
  std::vector<std::vector<std::int32_t>> alts;
  /// The matchers' shared cut masks (the Impl is const; this cache is the mutable part).
  std::shared_ptr<SharedCutMasks> cut_masks = std::make_shared<SharedCutMasks>();
};

/// Checks `rules` (every rule defined, no left recursion, no repetition of what can be empty)
/// and compiles them to bytes. Errors are Error(invalid_input, "grammar", ...).
std::shared_ptr<const Grammar> compile(std::vector<Rule> rules, int root);

/// The set of one code point.
Ranges single(char32_t c);
/// Every code point (surrogates excluded) not in `r`.
Ranges complement(const Ranges& r);
/// Sorted and merged.
Ranges normalize(Ranges r);

} // namespace tpullm::grammar
