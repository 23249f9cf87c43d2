// text_files_from_gguf: tokenizer.json / tokenizer_config.json / generation_config.json built from
// a GGUF's tokenizer metadata (gguf_text.hpp; docs/text.md, "Tokenizers from a GGUF").
#include "tpullm/frontend/gguf_text.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace tpullm::frontend {
namespace {
namespace gguf_tok {

using nlohmann::json;
using Metadata = std::map<std::string, GgufValue, std::less<>>;

// GGUF token types (tokenizer.ggml.token_type).
enum class TokType : std::int64_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6
};

// SentencePiece's whitespace marker U+2581.
constexpr std::string_view kSpace = "\xE2\x96\x81";

struct Reader {
  const Metadata& md;
  const std::string& where;

  const GgufValue* find(std::string_view key) const {
    const auto it = md.find(key);
    return it == md.end() ? nullptr : &it->second;
  }
  [[noreturn]] void bad(std::string_view key, std::string_view what) const {
    throw_error(ErrorKind::invalid_input, where, key, ": ", what);
  }
  const GgufScalar* scalar(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v)
      return nullptr;
    if (v->is_array())
      bad(key, "expected a single value, not an array");
    return &v->scalar;
  }
  std::optional<std::string> str(std::string_view key) const {
    const GgufScalar* s = scalar(key);
    if (!s)
      return std::nullopt;
    if (const auto* p = std::get_if<std::string>(s))
      return *p;
    bad(key, "expected a string");
  }
  std::optional<bool> boolean(std::string_view key) const {
    const GgufScalar* s = scalar(key);
    if (!s)
      return std::nullopt;
    if (const auto* p = std::get_if<bool>(s))
      return *p;
    bad(key, "expected a bool");
  }
  static std::optional<std::int64_t> as_int(const GgufScalar& s) {
    if (const auto* p = std::get_if<std::int64_t>(&s))
      return *p;
    if (const auto* p = std::get_if<std::uint64_t>(&s); p && *p <= INT64_MAX)
      return static_cast<std::int64_t>(*p);
    return std::nullopt;
  }
  std::optional<std::int64_t> integer(std::string_view key) const {
    const GgufScalar* s = scalar(key);
    if (!s)
      return std::nullopt;
    if (const auto i = as_int(*s))
      return i;
    bad(key, "expected an integer");
  }
  const GgufValue* array(std::string_view key) const {
    const GgufValue* v = find(key);
    if (v && !v->is_array())
      bad(key, "expected an array");
    if (v && !v->nested.empty())
      bad(key, "expected an array of values, not of arrays");
    return v;
  }
  std::optional<std::vector<std::string>> strings(std::string_view key) const {
    const GgufValue* v = array(key);
    if (!v)
      return std::nullopt;
    std::vector<std::string> out;
    out.reserve(v->array.size());
    for (std::size_t i = 0; i < v->array.size(); ++i) {
      const auto* p = std::get_if<std::string>(&v->array[i]);
      if (!p)
        bad(str_cat(key, "[", i, "]"), "expected a string");
      out.push_back(*p);
    }
    return out;
  }
  std::optional<std::vector<std::int64_t>> integers(std::string_view key) const {
    const GgufValue* v = array(key);
    if (!v)
      return std::nullopt;
    std::vector<std::int64_t> out;
    out.reserve(v->array.size());
    for (std::size_t i = 0; i < v->array.size(); ++i) {
      const auto x = as_int(v->array[i]);
      if (!x)
        bad(str_cat(key, "[", i, "]"), "expected an integer");
      out.push_back(*x);
    }
    return out;
  }
  std::optional<std::vector<double>> numbers(std::string_view key) const {
    const GgufValue* v = array(key);
    if (!v)
      return std::nullopt;
    std::vector<double> out;
    out.reserve(v->array.size());
    for (std::size_t i = 0; i < v->array.size(); ++i) {
      if (const auto* d = std::get_if<double>(&v->array[i]))
        out.push_back(*d);
      else if (const auto x = as_int(v->array[i]))
        out.push_back(static_cast<double>(*x));
      else
        bad(str_cat(key, "[", i, "]"), "expected a number");
    }
    return out;
  }
};

// A byte-level pre-tokenizer as llama.cpp names it (tokenizer.ggml.pre): the regexes applied in
// turn (each an HF Split with behavior Isolated, then ByteLevel without its own regex), or GPT-2's
// ByteLevel regex; where HF's tokenizer.json of that family is known, its regex as written there
// (llama.cpp rewrites `(?i:'s|...)` for its own engine; PCRE2 takes the original).
struct PreTokenizerSpec {
  std::vector<std::string_view> names;
  std::vector<std::string_view> regexes; // empty: GPT-2's ByteLevel regex
  bool nfc = false;                      // HF's file has an NFC normalizer (Qwen)
  bool ignore_merges = false;            // HF's model.ignore_merges (and llama.cpp's)
  bool add_bos = false;                  // llama.cpp's default when add_bos_token is absent
};

constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt2NoTailRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr std::string_view kBloomRegex =
    " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+";

const std::vector<PreTokenizerSpec>& pre_tokenizers() {
  static const std::vector<PreTokenizerSpec> specs = {
      {{"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2NoTailRegex, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral"},
       {kLlama3Regex},
       false,
       true,
       true},
      {{"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"}, {kLlama3Regex}},
      {{"qwen2", "deepseek-r1-qwen"}, {kQwen2Regex}, true},
      {{"stablelm2"}, {kQwen2Regex}},
      {{"deepseek-v3"},
       {R"(\p{N}{1,3})", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"deepseek-llm"},
       {R"([\r\n])",
        "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
        "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c"
        "\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5"
        "\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
        "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
        "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc"
        "\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
        "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
        "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
        "\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e"
        "\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
        "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
        "\U000118a0-\U000118df\U0001e900-\U0001e943]+",
        "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", R"(\s+$)",
        "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", R"(\p{N}+)"}},
      {{"deepseek-coder"},
       {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
        R"(\p{N})"}},
      {{"gpt-2", "phi-2", "mpt", "olmo", "jais"}, {}},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2NoTailRegex, "[0-9][0-9][0-9]"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       {R"(\p{N})", kGpt2NoTailRegex}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {kBloomRegex}},
      {{"viking"}, {kBloomRegex, R"(\p{N})"}},
      {{"tekken"},
       {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       false,
       true,
       true},
      {{"gpt-4o", "llama4"},
       {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       false,
       true},
  };
  return specs;
}

const PreTokenizerSpec& find_pre(const std::string& name, const std::string& where) {
  for (const auto& s : pre_tokenizers())
    for (const auto n : s.names)
      if (n == name)
        return s;
  throw_error(ErrorKind::unsupported, where, "tokenizer.ggml.pre '", name,
              "' is not supported (docs/text.md lists the pre-tokenizers tpullm implements)");
}

bool is_continuation(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

std::size_t code_points(std::string_view s) {
  std::size_t n = 0;
  for (const char c : s)
    n += is_continuation(c) ? 0 : 1;
  return n;
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (std::size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
  return s;
}

// Pieces longer than this get no merges (SentencePiece's own pieces are at most 16 characters;
// the longest user-defined ones seen, Gemma's whitespace runs, are 93 bytes), and the split
// search over all pieces may look at most kMaxSplitBytes bytes: the work of a hostile file stays
// bounded.
constexpr std::size_t kMaxMergedPieceBytes = 1024;
constexpr std::uint64_t kMaxSplitBytes = std::uint64_t{1} << 32;

// HF's SentencePiece-BPE conversion (generate_merges): every split of every piece into two vocab
// pieces is a merge with the piece's score; merges ordered by score, then by the left and right
// parts' lengths in code points (longest first), then by piece id and the parts' ids.
json merges_from_scores(const std::vector<std::string>& tokens, const std::vector<bool>& in_vocab,
                        const std::vector<double>& score, const std::string& where) {
  std::unordered_map<std::string_view, std::int32_t> id_of;
  id_of.reserve(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (in_vocab[i])
      id_of.emplace(tokens[i], static_cast<std::int32_t>(i));
  struct Merge {
    std::int32_t left, right;
    double score;
    std::uint32_t left_len, right_len;
  };
  std::vector<Merge> merges, local;
  std::uint64_t work = 0;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (!in_vocab[i] || tokens[i].size() > kMaxMergedPieceBytes)
      continue;
    const std::string_view piece = tokens[i];
    work += piece.size() * piece.size();
    if (work > kMaxSplitBytes)
      throw_error(ErrorKind::invalid_input, where,
                  "tokenizer.ggml.tokens: too many long pieces to derive merges from");
    local.clear();
    for (std::size_t b = 1; b < piece.size(); ++b) {
      if (is_continuation(piece[b]))
        continue;
      const auto l = id_of.find(piece.substr(0, b));
      if (l == id_of.end())
        continue;
      const auto r = id_of.find(piece.substr(b));
      if (r == id_of.end())
        continue;
      local.push_back({l->second, r->second, score[i],
                       static_cast<std::uint32_t>(code_points(piece.substr(0, b))),
                       static_cast<std::uint32_t>(code_points(piece.substr(b)))});
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score)
      return a.score > b.score;
    if (a.left_len != b.left_len)
      return a.left_len > b.left_len;
    return a.right_len > b.right_len;
  });
  json out = json::array();
  for (const Merge& m : merges)
    out.push_back(json::array(
        {tokens[static_cast<std::size_t>(m.left)], tokens[static_cast<std::size_t>(m.right)]}));
  return out;
}

json template_processing(const std::vector<std::string>& tokens, std::optional<std::int64_t> bos,
                         std::optional<std::int64_t> eos) {
  json single = json::array(), pair = json::array(), specials = json::object();
  const auto special = [&](std::int64_t id, int type_id, json& into) {
    const std::string& t = tokens[static_cast<std::size_t>(id)];
    into.push_back({{"SpecialToken", {{"id", t}, {"type_id", type_id}}}});
    specials[t] = {{"id", t}, {"ids", json::array({id})}, {"tokens", json::array({t})}};
  };
  for (const char* seq : {"A", "B"}) {
    const int type_id = seq[0] == 'A' ? 0 : 1;
    for (json* into : {&single, &pair}) {
      if (into == &single && type_id == 1)
        continue;
      if (bos)
        special(*bos, type_id, *into);
      into->push_back({{"Sequence", {{"id", seq}, {"type_id", type_id}}}});
      if (eos)
        special(*eos, type_id, *into);
    }
  }
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", pair},
          {"special_tokens", specials}};
}

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", false},
          {"use_regex", use_regex}};
}

// What llama.cpp treats as the end of a turn besides eos / eot / eom: control tokens with these
// texts (the markers of the common chat formats).
bool ends_generation(std::string_view t) {
  static const std::string_view texts[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>",  "<end_of_turn>", "<|endoftext|>",
      "<|eom_id|>", "<|return|>", "<|call|>", "<EOT>",         "<|end_of_text|>",
      "</s>",       "<|eos|>",    "<eos>"};
  return std::find(std::begin(texts), std::end(texts), t) != std::end(texts);
}

} // namespace gguf_tok
} // namespace

namespace {

TextFiles synthesize_gguf_text(const gguf_tok::Metadata& metadata, const std::string& where) {
  using namespace gguf_tok;
  const Reader md{metadata, where};
  const auto model = md.str("tokenizer.ggml.model");
  if (!model || *model == "none" || *model == "no_vocab")
    return {};
  const bool spm = *model == "llama";
  if (!spm && *model != "gpt2")
    throw_error(ErrorKind::unsupported, where, "tokenizer.ggml.model '", *model,
                "' is not supported (tpullm reads 'gpt2' byte-level BPE and 'llama' "
                "SentencePiece-style BPE)");

  auto tokens = md.strings("tokenizer.ggml.tokens");
  if (!tokens)
    md.bad("tokenizer.ggml.tokens", "missing (the vocabulary)");
  if (tokens->empty())
    md.bad("tokenizer.ggml.tokens", "is empty");
  const std::size_t n = tokens->size();
  const auto same_length = [&](const char* key, std::size_t size) {
    if (size != n)
      md.bad(key, str_cat("has ", size, " entries but tokenizer.ggml.tokens has ", n));
  };

  std::vector<TokType> types(n, TokType::normal);
  if (const auto tt = md.integers("tokenizer.ggml.token_type")) {
    same_length("tokenizer.ggml.token_type", tt->size());
    for (std::size_t i = 0; i < n; ++i) {
      if ((*tt)[i] < 0 || (*tt)[i] > 6)
        md.bad(str_cat("tokenizer.ggml.token_type[", i, "]"),
               str_cat((*tt)[i], " is not a token type (0-6)"));
      types[i] = (*tt)[i] == 0 ? TokType::normal : static_cast<TokType>((*tt)[i]);
    }
  }
  std::vector<double> scores(n, 0.0);
  if (const auto sc = md.numbers("tokenizer.ggml.scores")) {
    same_length("tokenizer.ggml.scores", sc->size());
    scores = *sc;
  } else if (spm) {
    md.bad("tokenizer.ggml.scores", "missing (the 'llama' model ranks its merges by them)");
  }

  const auto token_id = [&](const char* key) -> std::optional<std::int64_t> {
    const auto id = md.integer(key);
    if (id && (*id < 0 || static_cast<std::uint64_t>(*id) >= n))
      md.bad(key, str_cat("id ", *id, " is outside the vocabulary of ", n, " tokens"));
    return id;
  };
  // llama.cpp's defaults for a SentencePiece vocabulary when a key is absent.
  const auto spm_default = [&](std::optional<std::int64_t> id, std::int64_t dflt) {
    return id || !spm || static_cast<std::uint64_t>(dflt) >= n ? id
                                                               : std::optional<std::int64_t>(dflt);
  };
  const auto bos = spm_default(token_id("tokenizer.ggml.bos_token_id"), 1);
  const auto eos = spm_default(token_id("tokenizer.ggml.eos_token_id"), 2);
  const auto unk = spm_default(token_id("tokenizer.ggml.unknown_token_id"), 0);
  const auto eot = token_id("tokenizer.ggml.eot_token_id");
  const auto eom = token_id("tokenizer.ggml.eom_token_id");
  const auto pad = token_id("tokenizer.ggml.padding_token_id");

  const PreTokenizerSpec* pre = nullptr;
  if (!spm)
    pre = &find_pre(md.str("tokenizer.ggml.pre").value_or("default"), where);
  const bool add_bos = md.boolean("tokenizer.ggml.add_bos_token").value_or(spm || pre->add_bos);
  const bool add_eos = md.boolean("tokenizer.ggml.add_eos_token").value_or(false);
  if (add_bos && !bos)
    md.bad("tokenizer.ggml.add_bos_token", "is true but tokenizer.ggml.bos_token_id is not set");
  if (add_eos && !eos)
    md.bad("tokenizer.ggml.add_eos_token", "is true but tokenizer.ggml.eos_token_id is not set");
  const bool space_prefix = md.boolean("tokenizer.ggml.add_space_prefix").value_or(spm);

  // The converter writes user-defined SentencePiece tokens with U+2581 turned into spaces;
  // tokenizer.json holds them as the piece (matched in the raw text, as HF does).
  std::vector<bool> in_vocab(n, true);
  for (std::size_t i = 0; i < n; ++i) {
    if (types[i] == TokType::unused || (*tokens)[i].empty())
      in_vocab[i] = false;
    else if (spm && types[i] == TokType::user_defined)
      (*tokens)[i] = replace_all((*tokens)[i], " ", kSpace);
  }
  json vocab = json::object();
  std::unordered_map<std::string_view, std::size_t> seen; // token -> id, over the vocab
  seen.reserve(n);
  {
    for (std::size_t i = 0; i < n; ++i) {
      if (!in_vocab[i])
        continue;
      if (const auto [it, fresh] = seen.emplace((*tokens)[i], i); !fresh)
        md.bad("tokenizer.ggml.tokens",
               str_cat("'", (*tokens)[i], "' appears at ids ", it->second, " and ", i));
      vocab[(*tokens)[i]] = i;
    }
  }
  if (add_bos && !in_vocab[static_cast<std::size_t>(*bos)])
    md.bad("tokenizer.ggml.bos_token_id", str_cat("id ", *bos, " names an unused or empty token"));
  if (add_eos && !in_vocab[static_cast<std::size_t>(*eos)])
    md.bad("tokenizer.ggml.eos_token_id", str_cat("id ", *eos, " names an unused or empty token"));

  json added = json::array();
  bool byte_tokens = false;
  for (std::size_t i = 0; i < n; ++i) {
    switch (types[i]) {
    case TokType::control:
    case TokType::user_defined:
    case TokType::unknown:
      if (in_vocab[i])
        added.push_back({{"id", i},
                         {"content", (*tokens)[i]},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", types[i] != TokType::user_defined}});
      break;
    case TokType::byte:
      byte_tokens = true;
      break;
    case TokType::undefined:
    case TokType::normal:
    case TokType::unused:
      break;
    }
  }

  json bpe = {{"type", "BPE"},
              {"dropout", nullptr},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr},
              {"vocab", std::move(vocab)}};
  json tok = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
  if (spm) {
    // SentencePiece gives control, user-defined, unknown and byte pieces the score 0; the
    // converter writes -1000 for the added ones, which would misplace their merges.
    std::vector<double> rank_score = scores;
    for (std::size_t i = 0; i < n; ++i)
      if (types[i] != TokType::normal && types[i] != TokType::undefined)
        rank_score[i] = 0.0;
    bpe["merges"] = merges_from_scores(*tokens, in_vocab, rank_score, where);
    bpe["unk_token"] = unk && in_vocab[static_cast<std::size_t>(*unk)]
                           ? json((*tokens)[static_cast<std::size_t>(*unk)])
                           : json(nullptr);
    bpe["fuse_unk"] = true;
    bpe["byte_fallback"] = byte_tokens;
    bpe["ignore_merges"] = false;
    json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}};
    tok["normalizer"] =
        space_prefix ? json{{"type", "Sequence"},
                            {"normalizers",
                             {{{"type", "Prepend"}, {"prepend", kSpace}}, std::move(replace)}}}
                     : std::move(replace);
    tok["pre_tokenizer"] = nullptr;
    json decoders = {{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                     {{"type", "ByteFallback"}},
                     {{"type", "Fuse"}}};
    if (space_prefix)
      decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    tok["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(decoders)}};
  } else {
    const auto merge_lines = md.strings("tokenizer.ggml.merges");
    if (!merge_lines)
      md.bad("tokenizer.ggml.merges", "missing (the 'gpt2' model needs its merges)");
    json merges = json::array();
    for (std::size_t r = 0; r < merge_lines->size(); ++r) {
      const std::string& line = (*merge_lines)[r];
      const std::size_t sp = line.find(' ', 1);
      if (sp == std::string::npos)
        md.bad(str_cat("tokenizer.ggml.merges[", r, "]"), "expected two tokens split by a space");
      std::string a = line.substr(0, sp), b = line.substr(sp + 1);
      for (const std::string* part : {&a, &b})
        if (!seen.count(*part))
          md.bad(str_cat("tokenizer.ggml.merges[", r, "]"),
                 str_cat("'", *part, "' is not a token"));
      merges.push_back(json::array({std::move(a), std::move(b)}));
    }
    bpe["merges"] = std::move(merges);
    bpe["unk_token"] = nullptr;
    bpe["fuse_unk"] = false;
    bpe["byte_fallback"] = false;
    bpe["ignore_merges"] = pre->ignore_merges;
    tok["normalizer"] = pre->nfc ? json{{"type", "NFC"}} : json(nullptr);
    if (pre->regexes.empty()) {
      tok["pre_tokenizer"] = byte_level(true);
    } else {
      json steps = json::array();
      for (const auto re : pre->regexes)
        steps.push_back({{"type", "Split"},
                         {"pattern", {{"Regex", re}}},
                         {"behavior", "Isolated"},
                         {"invert", false}});
      steps.push_back(byte_level(false));
      tok["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", std::move(steps)}};
    }
    tok["decoder"] = byte_level(true);
  }
  tok["added_tokens"] = std::move(added);
  tok["model"] = std::move(bpe);
  if (add_bos || add_eos)
    tok["post_processor"] =
        template_processing(*tokens, add_bos ? bos : std::nullopt, add_eos ? eos : std::nullopt);
  else
    tok["post_processor"] = spm ? json(nullptr) : byte_level(false);

  const auto token_text = [&](std::optional<std::int64_t> id) {
    return id && in_vocab[static_cast<std::size_t>(*id)]
               ? json((*tokens)[static_cast<std::size_t>(*id)])
               : json(nullptr);
  };
  json cfg = {{"bos_token", token_text(bos)},
              {"eos_token", token_text(eos)},
              {"pad_token", token_text(pad)},
              {"unk_token", token_text(unk)},
              {"add_bos_token", add_bos},
              {"add_eos_token", add_eos},
              {"clean_up_tokenization_spaces", false}};
  if (const auto tpl = md.str("tokenizer.chat_template"))
    cfg["chat_template"] = *tpl;

  json gen = json::object();
  if (bos)
    gen["bos_token_id"] = *bos;
  json eos_ids = json::array();
  const auto add_eos_id = [&](std::int64_t id) {
    if (std::find(eos_ids.begin(), eos_ids.end(), json(id)) == eos_ids.end())
      eos_ids.push_back(id);
  };
  for (const auto id : {eos, eot, eom})
    if (id)
      add_eos_id(*id);
  for (std::size_t i = 0; i < n; ++i)
    if (types[i] == TokType::control && ends_generation((*tokens)[i]))
      add_eos_id(static_cast<std::int64_t>(i));
  if (!eos_ids.empty())
    gen["eos_token_id"] = std::move(eos_ids);
  if (pad)
    gen["pad_token_id"] = *pad;

  TextFiles out;
  out.tokenizer_json = tok.dump();
  out.tokenizer_config_json = cfg.dump();
  out.generation_config_json = gen.dump();
  return out;
}

} // namespace

TextFiles text_files_from_gguf(const std::map<std::string, GgufValue, std::less<>>& metadata,
                               const std::string& where) {
  try {
    return synthesize_gguf_text(metadata, where);
  } catch (const nlohmann::json::exception& e) {
    // Only a token that is not UTF-8 reaches here (the GGUF reader refuses those already).
    throw_error(ErrorKind::invalid_input, where, "tokenizer metadata: ", e.what());
  }
}

} // namespace tpullm::frontend
