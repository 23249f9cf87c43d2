// The context-overflow policies of a chat (context_overflow.hpp): parsing, the answer room, and
// truncate-middle's choice of turns.
#include "tpullm/runtime/context_overflow.hpp"

#include <algorithm>
#include <string>

#include "tpullm/support/error.hpp"

namespace tpullm::runtime {

ContextOverflow parse_context_overflow(std::string_view s, std::string_view where) {
  if (s == "refuse")
    return ContextOverflow::refuse;
  if (s == "truncate-middle")
    return ContextOverflow::truncate_middle;
  throw Error(ErrorKind::invalid_input, std::string(where),
              str_cat("'", s, "' is not a policy (refuse or truncate-middle)"));
}

const char* to_string(ContextOverflow p) {
  return p == ContextOverflow::refuse ? "refuse" : "truncate-middle";
}

std::int64_t overflow_answer_room(std::int64_t seq_length, std::int64_t max_new_tokens) {
  return std::max<std::int64_t>(1, std::min(max_new_tokens, seq_length / 2));
}

namespace {

bool has_role(const nlohmann::ordered_json& m, std::string_view role) {
  return m.is_object() && m.contains("role") && m["role"].is_string() &&
         m["role"].get_ref<const std::string&>() == role;
}

} // namespace

Truncation truncate_middle(const nlohmann::ordered_json& messages, std::vector<std::int32_t> prompt,
                           std::int64_t limit, const RenderMessages& render) {
  check(messages.is_array(), ErrorKind::invalid_input, "messages", "must be a JSON array");
  const std::size_t n = messages.size();
  std::size_t lead = 0; // leading system / developer messages: always kept
  while (lead < n && (has_role(messages[lead], "system") || has_role(messages[lead], "developer")))
    ++lead;
  std::size_t last = n; // the last turn starts at the last user message (kept)
  for (std::size_t i = n; i > lead; --i)
    if (has_role(messages[i - 1], "user")) {
      last = i - 1;
      break;
    }
  if (last == n)
    last = lead; // no user message after the system ones: nothing can be dropped
  // starts[k]: the first message kept when the k oldest turns are dropped (starts.back() = last).
  std::vector<std::size_t> starts{lead};
  for (std::size_t i = lead + 1; i < last; ++i)
    if (has_role(messages[i], "user"))
      starts.push_back(i);
  if (last > lead)
    starts.push_back(last);

  auto kept = [&](std::size_t k) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < lead; ++i)
      out.push_back(messages[i]);
    for (std::size_t i = starts[k]; i < n; ++i)
      out.push_back(messages[i]);
    return out;
  };
  Truncation t;
  t.messages = messages;
  t.prompt = std::move(prompt);
  const auto whole = static_cast<std::int64_t>(t.prompt.size());
  if (whole <= limit)
    return t;
  const std::size_t turns = starts.size() - 1;
  auto most = turns == 0 ? messages : kept(turns);
  auto shortest = turns == 0 ? t.prompt : render(most);
  check(static_cast<std::int64_t>(shortest.size()) <= limit, ErrorKind::invalid_input, "context",
        turns == 0
            ? std::string("the conversation has no earlier turn to drop: it takes ")
            : str_cat("even without its ", turns, turns == 1 ? " earlier turn" : " earlier turns",
                      " the conversation takes "),
        shortest.size(), " tokens, more than the ", limit,
        " that leave room for the answer in the compiled sequence length");
  // The fewest dropped turns that fit: dropping more never lengthens the prompt.
  std::size_t lo = 0, hi = turns; // render(kept(lo)) does not fit, render(kept(hi)) does
  t.messages = std::move(most);
  t.prompt = std::move(shortest);
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    auto m = kept(mid);
    auto p = render(m);
    if (static_cast<std::int64_t>(p.size()) <= limit) {
      hi = mid;
      t.messages = std::move(m);
      t.prompt = std::move(p);
    } else {
      lo = mid;
    }
  }
  t.dropped_messages = static_cast<std::int64_t>(starts[hi] - lead);
  t.dropped_tokens = whole - static_cast<std::int64_t>(t.prompt.size());
  return t;
}

std::optional<Truncation> truncate_to_fit(const nlohmann::ordered_json& messages,
                                          const std::vector<std::int32_t>& prompt,
                                          std::int64_t seq_length, std::int64_t answer_budget,
                                          const RenderMessages& render) {
  const std::int64_t limit = seq_length - overflow_answer_room(seq_length, answer_budget);
  if (static_cast<std::int64_t>(prompt.size()) <= limit)
    return std::nullopt;
  return truncate_middle(messages, prompt, limit, render);
}

} // namespace tpullm::runtime
