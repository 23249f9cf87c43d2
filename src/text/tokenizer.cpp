// text::Tokenizer: loading tokenizer.json and running the pipeline (tokenizer_impl.hpp).
#include "tpullm/text/tokenizer.hpp"

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
