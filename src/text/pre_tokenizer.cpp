// Pre-tokenizers: see pre_tokenizer.hpp.
#include "pre_tokenizer.hpp"

#include <algorithm>
#include <tuple>

#include "unicode.hpp"

namespace tpullm::text::detail {
namespace {

using Range = std::pair<std::size_t, std::size_t>;
struct Cut {
  std::size_t begin, end;
  bool match;
};

SplitBehavior behavior_of(const std::string& s, const std::string& path) {
  if (s == "Removed")
    return SplitBehavior::removed;
  if (s == "Isolated")
    return SplitBehavior::isolated;
  if (s == "MergedWithPrevious")
    return SplitBehavior::merged_with_previous;
  if (s == "MergedWithNext")
    return SplitBehavior::merged_with_next;
  if (s == "Contiguous")
    return SplitBehavior::contiguous;
  throw_error(ErrorKind::unsupported, std::string(kFile), path, ".behavior '", s,
              "' is not supported");
}

void parse_into(const json& j, const std::string& path, PreTokenizer& p, int depth) {
  const std::string type = type_of(j, path);
  if (type == "Sequence") {
    const json& list = sequence_list(j, "pretokenizers", path, depth, p.steps.size());
    for (std::size_t i = 0; i < list.size(); ++i)
      parse_into(list[i], path + ".pretokenizers[" + std::to_string(i) + "]", p, depth + 1);
  } else if (type == "Split") {
    SplitStep s{pattern_field(j, path), behavior_of(str_field(j, "behavior", path), path),
                bool_field(j, "invert", path, false)};
    p.steps.emplace_back(std::move(s));
  } else if (type == "ByteLevel") {
    ByteLevelStep b;
    b.add_prefix_space = bool_field(j, "add_prefix_space", path, true);
    if (bool_field(j, "use_regex", path, true))
      b.regex = gpt2_regex();
    p.steps.emplace_back(std::move(b));
  } else {
    unsupported_type("pre_tokenizer", type);
  }
}

// The pieces of `s` cut at `ranges` (matches), each flagged, covering all of s (HF's
// Pattern::find_matches).
void cuts_of(std::string_view s, const std::vector<Range>& ranges, bool invert,
             std::vector<Cut>& out) {
  out.clear();
  if (s.empty()) {
    out.push_back({0, 0, invert});
    return;
  }
  std::size_t prev = 0;
  for (const auto& [b, e] : ranges) {
    if (b != prev)
      out.push_back({prev, b, invert});
    out.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != s.size())
    out.push_back({prev, s.size(), invert});
}

// Applies a delimiter behaviour to the cuts (HF's NormalizedString::split); empty results drop.
void split_piece(std::string_view s, const SplitStep& step, std::vector<Range>& ranges,
                 std::vector<Cut>& cuts, std::vector<std::string>& out) {
  ranges.clear();
  step.pattern.find_all(s, ranges);
  cuts_of(s, ranges, step.invert, cuts);
  std::vector<Cut> merged;
  switch (step.behavior) {
  case SplitBehavior::isolated:
    merged = cuts;
    break;
  case SplitBehavior::removed:
    for (const Cut& c : cuts)
      if (!c.match)
        merged.push_back(c);
    break;
  case SplitBehavior::merged_with_previous: {
    bool prev_match = false;
    for (const Cut& c : cuts) {
      if (c.match && !prev_match && !merged.empty())
        merged.back().end = c.end;
      else
        merged.push_back(c);
      prev_match = c.match;
    }
    break;
  }
  case SplitBehavior::merged_with_next: {
    bool prev_match = false;
    for (auto it = cuts.rbegin(); it != cuts.rend(); ++it) {
      if (it->match && !prev_match && !merged.empty())
        merged.back().begin = it->begin;
      else
        merged.push_back(*it);
      prev_match = it->match;
    }
    std::reverse(merged.begin(), merged.end());
    break;
  }
  case SplitBehavior::contiguous: {
    bool prev_match = false;
    for (const Cut& c : cuts) {
      if (c.match == prev_match && !merged.empty())
        merged.back().end = c.end;
      else
        merged.push_back(c);
      prev_match = c.match;
    }
    break;
  }
  }
  for (const Cut& c : merged)
    if (c.end > c.begin)
      out.emplace_back(s.substr(c.begin, c.end - c.begin));
}

std::string byte_map(std::string_view s) {
  const auto& chars = byte_chars();
  std::string out;
  out.reserve(s.size() + s.size() / 2);
  for (const char ch : s)
    out += chars[static_cast<unsigned char>(ch)];
  return out;
}

} // namespace

std::shared_ptr<const Regex> gpt2_regex() {
  static const auto re = std::make_shared<const Regex>(
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
      "ByteLevel regex");
  return re;
}

std::vector<std::string> PreTokenizer::apply(std::string_view text) const {
  std::vector<std::string> pieces, next;
  if (text.empty())
    return pieces;
  pieces.emplace_back(text);
  std::vector<Range> ranges;
  std::vector<Cut> cuts;
  for (const auto& step : steps) {
    next.clear();
    std::visit(Overload{[&](const SplitStep& s) {
                          for (const std::string& p : pieces)
                            split_piece(p, s, ranges, cuts, next);
                        },
                        [&](const ByteLevelStep& b) {
                          for (std::string& p : pieces) {
                            if (b.add_prefix_space && (p.empty() || p[0] != ' '))
                              p.insert(0, 1, ' ');
                            if (b.regex) {
                              const std::size_t first = next.size();
                              split_piece(p, SplitStep{Pattern{{}, b.regex}}, ranges, cuts, next);
                              for (std::size_t i = first; i < next.size(); ++i)
                                next[i] = byte_map(next[i]);
                            } else {
                              next.push_back(byte_map(p));
                            }
                          }
                        }},
               step);
    pieces.swap(next);
  }
  return pieces;
}

PreTokenizer parse_pre_tokenizer(const json& j) {
  PreTokenizer p;
  if (!j.is_null())
    parse_into(j, "pre_tokenizer", p, 1);
  return p;
}

} // namespace tpullm::text::detail
