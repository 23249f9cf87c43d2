// text::Tokenizer: loading tokenizer.json and running the pipeline (tokenizer_impl.hpp).
#include "tpullm/text/tokenizer.hpp"

#include <algorithm>

#include "tokenizer_impl.hpp"
#include "tpullm/support/input_file.hpp"
#include "tpullm/support/json.hpp"
#include "unicode.hpp"

namespace tpullm::text {

using detail::json;

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_dir(const std::filesystem::path& dir) {
  const auto optional_file = [&](const char* name) -> std::string {
    const auto p = dir / name;
    std::error_code ec;
    return std::filesystem::exists(p, ec) ? read_regular_file(p) : std::string();
  };
  const std::string tok = read_regular_file(dir / "tokenizer.json");
  try {
    return from_json(tok, optional_file("tokenizer_config.json"),
                     optional_file("generation_config.json"));
  } catch (const Error& e) {
    throw e.within(dir.string());
  }
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json,
                               std::string_view tokenizer_config_json,
                               std::string_view generation_config_json) {
  const json j = parse_json(tokenizer_json, std::string(detail::kFile), "not valid JSON");
  if (!j.is_object())
    detail::bad_field("(top level)", "expected a JSON object");
  static const char* const known[] = {"version",        "truncation", "padding",
                                      "added_tokens",   "normalizer", "pre_tokenizer",
                                      "post_processor", "decoder",    "model"};
  for (const auto& [key, value] : j.items()) {
    bool ok = false;
    for (const char* k : known)
      ok = ok || key == k;
    if (!ok)
      throw_error(ErrorKind::unsupported, std::string(detail::kFile), "field '", key,
                  "' is not supported");
  }
  for (const char* k : {"truncation", "padding"})
    if (!detail::member(j, k).is_null())
      throw_error(ErrorKind::unsupported, std::string(detail::kFile), k,
                  " is not supported (only null)");
  auto impl = std::make_unique<Impl>();
  if (detail::member(j, "model").is_null())
    detail::bad_field("model", "missing");
  impl->model = std::make_unique<detail::BpeModel>(j["model"]);
  impl->normalizer = detail::parse_normalizer(detail::member(j, "normalizer"));
  impl->pre_tokenizer = detail::parse_pre_tokenizer(detail::member(j, "pre_tokenizer"));
  impl->post_processor = detail::parse_post_processor(detail::member(j, "post_processor"));
  impl->decoder = detail::parse_decoder(detail::member(j, "decoder"));
  impl->added =
      std::make_unique<detail::AddedVocab>(detail::member(j, "added_tokens"), impl->normalizer);
  impl->vocab_size = impl->model->size();
  for (const auto& a : impl->added->tokens())
    impl->vocab_size = std::max<std::int64_t>(impl->vocab_size, a.id + 1);
  impl->tokenizer_json = std::string(tokenizer_json);
  impl->tokenizer_config_json = std::string(tokenizer_config_json);
  impl->generation_config_json = std::string(generation_config_json);
  Tokenizer t(std::move(impl));
  t.impl_->config = detail::parse_config(tokenizer_config_json, generation_config_json, t);
  return t;
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& m = *impl_;
  const std::string clean = detail::sanitize_utf8(text);
  std::vector<std::int32_t> ids;
  std::vector<detail::Segment> raw, norm;
  m.added->split(clean, false, raw);
  for (const auto& seg : raw) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    const std::string normalized = m.normalizer.apply(clean.substr(seg.begin, seg.end - seg.begin));
    norm.clear();
    m.added->split(normalized, true, norm);
    for (const auto& s : norm) {
      if (s.id >= 0) {
        ids.push_back(s.id);
        continue;
      }
      for (const std::string& piece :
           m.pre_tokenizer.apply(std::string_view(normalized).substr(s.begin, s.end - s.begin)))
        m.model->encode(piece, ids);
    }
  }
  if (add_special_tokens)
    m.post_processor.apply(ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const std::int32_t id : ids) {
    if (const auto* a = m.added->by_id(id)) {
      if (!(skip_special_tokens && a->special))
        tokens.push_back(a->content);
    } else if (const std::string* t = m.model->id_to_token(id)) {
      if (!(skip_special_tokens && is_special(id)))
        tokens.push_back(*t);
    }
  }
  return m.decoder.decode(std::move(tokens));
}

std::vector<std::string> Tokenizer::pieces(std::span<const std::int32_t> ids) const {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (const std::int32_t id : ids) {
    if (const auto* a = impl_->added->by_id(id))
      out.push_back(a->content);
    else if (const std::string* t = impl_->model->id_to_token(id))
      out.push_back(*t);
    else
      out.emplace_back();
  }
  return out;
}

std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view piece) const {
  if (const auto* a = impl_->added->by_content(piece))
    return a->id;
  return impl_->model->token_to_id(piece);
}

std::string Tokenizer::token_bytes(std::int32_t id) const {
  if (const auto* a = impl_->added->by_id(id))
    return impl_->decoder.present ? impl_->decoder.raw_bytes(a->content) : a->content;
  if (const std::string* t = impl_->model->id_to_token(id))
    return impl_->decoder.present ? impl_->decoder.raw_bytes(*t) : *t;
  return {};
}

std::shared_ptr<const TokenTable> Tokenizer::token_table() const {
  std::call_once(impl_->token_table_once, [&] {
    const auto n = static_cast<std::size_t>(impl_->vocab_size);
    std::vector<std::string> bytes(n);
    std::vector<std::uint8_t> special(n, 0);
    for (std::size_t id = 0; id < n; ++id) {
      bytes[id] = token_bytes(static_cast<std::int32_t>(id));
      special[id] = is_special(static_cast<std::int32_t>(id)) ? 1 : 0;
    }
    impl_->token_table =
        std::make_shared<const TokenTable>(TokenTable::build(std::move(bytes), std::move(special)));
  });
  return impl_->token_table;
}

TokenTable TokenTable::build(std::vector<std::string> bytes, std::vector<std::uint8_t> special) {
  TokenTable t;
  t.bytes = std::move(bytes);
  t.special = std::move(special);
  t.special.resize(t.bytes.size(), 0);
  std::vector<std::int32_t> order;
  for (std::size_t id = 0; id < t.bytes.size(); ++id)
    if (!t.special[id] && !t.bytes[id].empty() && t.bytes[id].size() <= 65535)
      order.push_back(static_cast<std::int32_t>(id));
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    const auto &x = t.bytes[static_cast<std::size_t>(a)], &y = t.bytes[static_cast<std::size_t>(b)];
    return x != y ? x < y : a < b;
  });
  // Preorder: the sorted strings share prefixes with their predecessor; `path` holds the nodes
  // of the previous string, closed (end set) when the next string leaves them.
  t.nodes.push_back(TokenTable::Node{});
  std::vector<std::int32_t> path{0};
  std::string prev;
  const auto close_to = [&](std::size_t depth) {
    while (path.size() > depth + 1) {
      t.nodes[static_cast<std::size_t>(path.back())].end =
          static_cast<std::int32_t>(t.nodes.size());
      path.pop_back();
    }
  };
  for (const std::int32_t id : order) {
    const std::string& s = t.bytes[static_cast<std::size_t>(id)];
    std::size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common])
      ++common;
    close_to(common);
    for (std::size_t d = common; d < s.size(); ++d) {
      TokenTable::Node n;
      n.byte = static_cast<std::uint8_t>(s[d]);
      n.depth = static_cast<std::uint16_t>(d + 1);
      n.first = n.last = static_cast<std::int32_t>(t.ids.size());
      path.push_back(static_cast<std::int32_t>(t.nodes.size()));
      t.nodes.push_back(n);
    }
    // Tokens are pushed in node order, so a node's ids stay contiguous.
    auto& leaf = t.nodes[static_cast<std::size_t>(path.back())];
    if (leaf.last != static_cast<std::int32_t>(t.ids.size()))
      leaf.first = static_cast<std::int32_t>(t.ids.size());
    t.ids.push_back(id);
    leaf.last = static_cast<std::int32_t>(t.ids.size());
    prev = s;
  }
  close_to(0);
  t.nodes[0].end = static_cast<std::int32_t>(t.nodes.size());
  return t;
}

std::int64_t Tokenizer::vocab_size() const {
  return impl_->vocab_size;
}

bool Tokenizer::is_special(std::int32_t id) const {
  const auto* a = impl_->added->by_id(id);
  return a != nullptr && a->special;
}

const TokenizerConfig& Tokenizer::config() const {
  return impl_->config;
}
const std::string& Tokenizer::tokenizer_json() const {
  return impl_->tokenizer_json;
}
const std::string& Tokenizer::tokenizer_config_json() const {
  return impl_->tokenizer_config_json;
}
const std::string& Tokenizer::generation_config_json() const {
  return impl_->generation_config_json;
}

} // namespace tpullm::text
