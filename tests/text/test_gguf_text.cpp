// The tokenizer and chat template of a GGUF (frontend::text_files_from_gguf): each real tokenizer
// file is turned into GGUF metadata here as llama.cpp's convert_hf_to_gguf.py writes it, the
// metadata back into tokenizer files, and the resulting tokenizer must give HuggingFace's own ids
// (tests/data/text/tok/NAME.jsonl) on every oracle case; the Qwen3 metadata's chat template renders
// as the chat oracle expects; bad metadata is refused in one line.
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test_data_dir.hpp"
#include "tokenizer_files.hpp"
#include "tpullm/frontend/gguf.hpp"
#include "tpullm/frontend/gguf_text.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/text/chat_template.hpp"
#include "tpullm/text/tokenizer.hpp"

using nlohmann::json;
using tpullm::Error;
using tpullm::ErrorKind;
using tpullm::frontend::GgufScalar;
using tpullm::frontend::GgufValue;
using tpullm::frontend::GgufValueType;
using tpullm::frontend::text_files_from_gguf;
using tpullm::text::Tokenizer;
using Metadata = std::map<std::string, GgufValue, std::less<>>;

namespace {

// --- GGUF values as the reader gives them back ---------------------------------------------------
GgufValue gguf_string(std::string s) {
  GgufValue v;
  v.type = GgufValueType::string;
  v.scalar = std::move(s);
  return v;
}
GgufValue gguf_u32(std::int64_t x) {
  GgufValue v;
  v.type = GgufValueType::u32;
  v.scalar = x;
  return v;
}
GgufValue gguf_bool(bool b) {
  GgufValue v;
  v.type = GgufValueType::boolean;
  v.scalar = b;
  return v;
}
template <class T>
GgufValue gguf_array(GgufValueType elem, const std::vector<T>& xs) {
  GgufValue v;
  v.type = GgufValueType::array;
  v.elem_type = elem;
  v.array.resize(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i)
    v.array[i].template emplace<T>(xs[i]);
  return v;
}

// --- convert_hf_to_gguf.py, from tokenizer.json + tokenizer_config.json --------------------------
enum TokenType : std::int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUser = 4,
  kUnused = 5,
  kByte = 6
};

json gguf_read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  REQUIRE(f.good());
  return json::parse(f);
}

std::string content_of(const json& v) {
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_object() && v.contains("content"))
    return v["content"].get<std::string>();
  return "";
}

// The converter's does_token_look_special.
bool looks_special(const std::string& t) {
  const auto wrapped = [&](std::string_view a, std::string_view z) {
    return t.size() >= a.size() + z.size() && t.compare(0, a.size(), a) == 0 &&
           t.compare(t.size() - z.size(), z.size(), z) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

std::string spaces_for_marker(std::string s) {
  for (std::size_t p = s.find("\xE2\x96\x81"); p != std::string::npos; p = s.find("\xE2\x96\x81"))
    s.replace(p, 3, " ");
  return s;
}

struct Converted {
  Metadata md;
  std::set<std::int32_t> special_only_in_gguf; // HF: added but not special; GGUF: CONTROL
};

// gguf-py's SpecialVocab: special-token ids by their tokenizer_config.json strings, add_bos /
// add_eos from a TemplateProcessing post-processor and then tokenizer_config.json, the template.
void special_vocab(const json& tj, const json& cfg, Metadata& md) {
  std::map<std::string, std::int64_t> added;
  for (const auto& a : tj["added_tokens"])
    added.emplace(a["content"].get<std::string>(), a["id"].get<std::int64_t>());
  std::map<std::string, std::optional<bool>> add{{"bos", {}}, {"eos", {}}};
  const json& post = tj["post_processor"];
  if (post.is_object()) {
    const json procs = post.contains("processors") ? post["processors"] : json::array({post});
    for (const auto& p : procs) {
      if (p["type"] != "TemplateProcessing")
        continue;
      const json& single = p["single"];
      if (single.size() > 1 && single.front().contains("SpecialToken"))
        add["bos"] =
            single.front()["SpecialToken"]["id"] == content_of(cfg.value("bos_token", json()));
      if (single.size() > 1 && single.back().contains("SpecialToken"))
        add["eos"] =
            single.back()["SpecialToken"]["id"] == content_of(cfg.value("eos_token", json()));
    }
  }
  const std::map<std::string, std::string> key_of{{"bos", "bos_token_id"},
                                                  {"eos", "eos_token_id"},
                                                  {"unk", "unknown_token_id"},
                                                  {"pad", "padding_token_id"}};
  for (const auto& [typ, key] : key_of) {
    if (typ == "bos" || typ == "eos")
      if (cfg.contains("add_" + typ + "_token") && cfg["add_" + typ + "_token"].is_boolean())
        add[typ] = cfg["add_" + typ + "_token"].get<bool>();
    const std::string text = content_of(cfg.value(typ + "_token", json()));
    if (const auto it = added.find(text); !text.empty() && it != added.end())
      md["tokenizer.ggml." + key] = gguf_u32(it->second);
  }
  for (const auto& [typ, flag] : add)
    if (flag)
      md["tokenizer.ggml.add_" + typ + "_token"] = gguf_bool(*flag);
  if (cfg.contains("chat_template") && cfg["chat_template"].is_string())
    md["tokenizer.chat_template"] = gguf_string(cfg["chat_template"].get<std::string>());
}

// _set_vocab_gpt2 (get_vocab_base): tokens in id order ("[PADi]" UNUSED where there is none up to
// `vocab_size`), added tokens CONTROL when special or special-looking else USER_DEFINED, merges as
// "a b" strings, the pre-tokenizer's name.
Converted convert_gpt2(const std::string& name, const std::string& pre, std::int64_t vocab_size) {
  const auto dir = real_tokenizer_dir(name);
  const json tj = gguf_read_json(dir / "tokenizer.json"),
             cfg = gguf_read_json(dir / "tokenizer_config.json");
  std::map<std::int64_t, std::string> by_id;
  for (const auto& [tok, id] : tj["model"]["vocab"].items())
    by_id[id.get<std::int64_t>()] = tok;
  std::map<std::int64_t, json> added;
  for (const auto& a : tj["added_tokens"]) {
    added[a["id"].get<std::int64_t>()] = a;
    by_id[a["id"].get<std::int64_t>()] = a["content"].get<std::string>();
  }
  vocab_size = std::max(vocab_size, by_id.rbegin()->first + 1);
  Converted c;
  std::vector<std::string> tokens;
  std::vector<std::int64_t> types;
  for (std::int64_t i = 0; i < vocab_size; ++i) {
    const auto it = by_id.find(i);
    if (it == by_id.end()) {
      tokens.push_back("[PAD" + std::to_string(i) + "]");
      types.push_back(kUnused);
    } else if (const auto a = added.find(i); a != added.end()) {
      const bool special = a->second["special"].get<bool>();
      if (special || looks_special(it->second)) {
        types.push_back(kControl);
        if (!special)
          c.special_only_in_gguf.insert(static_cast<std::int32_t>(i));
        tokens.push_back(it->second);
      } else {
        types.push_back(kUser);
        tokens.push_back(spaces_for_marker(it->second));
      }
    } else {
      types.push_back(kNormal);
      tokens.push_back(it->second);
    }
  }
  std::vector<std::string> merges;
  for (const auto& m : tj["model"]["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>()
                                   : m[0].get<std::string>() + " " + m[1].get<std::string>());
  c.md["tokenizer.ggml.model"] = gguf_string("gpt2");
  c.md["tokenizer.ggml.pre"] = gguf_string(pre);
  c.md["tokenizer.ggml.tokens"] = gguf_array(GgufValueType::string, tokens);
  c.md["tokenizer.ggml.token_type"] = gguf_array(GgufValueType::i32, types);
  c.md["tokenizer.ggml.merges"] = gguf_array(GgufValueType::string, merges);
  special_vocab(tj, cfg, c.md);
  return c;
}

// _set_vocab_sentencepiece over the SentencePiece model that tokenizer.json was converted from:
// its pieces in id order; types unknown / control / user-defined / byte / normal as SentencePiece
// has them (HF turned control pieces into special added tokens, user-defined ones into plain
// added tokens); scores as a SentencePiece BPE model holds them (0 for the non-normal pieces,
// falling with the rank of the merge that makes a normal piece: HF derived the file's merges from
// them); then every entry of tokenizer_config.json's added_tokens_decoder rewritten as the
// converter does (CONTROL or USER_DEFINED with U+2581 as spaces, score -1000).
Converted convert_spm(const std::string& name, std::optional<bool> add_space_prefix) {
  const auto dir = real_tokenizer_dir(name);
  const json tj = gguf_read_json(dir / "tokenizer.json"),
             cfg = gguf_read_json(dir / "tokenizer_config.json");
  const json& model = tj["model"];
  std::map<std::int64_t, std::string> by_id;
  for (const auto& [tok, id] : model["vocab"].items())
    by_id[id.get<std::int64_t>()] = tok;
  std::map<std::int64_t, bool> added_special;
  for (const auto& a : tj["added_tokens"]) {
    added_special[a["id"].get<std::int64_t>()] = a["special"].get<bool>();
    by_id.emplace(a["id"].get<std::int64_t>(), a["content"].get<std::string>());
  }
  std::map<std::string, std::size_t> first_rank;
  const json& merges = model["merges"];
  for (std::size_t r = 0; r < merges.size(); ++r) {
    const json& m = merges[r];
    const std::string merged = m.is_string() ? [&] {
      std::string s = m.get<std::string>();
      s.erase(s.find(' '), 1);
      return s;
    }()
                                             : m[0].get<std::string>() + m[1].get<std::string>();
    first_rank.emplace(merged, r);
  }
  const std::string unk =
      model["unk_token"].is_string() ? model["unk_token"].get<std::string>() : "";
  const std::int64_t n = by_id.rbegin()->first + 1;
  std::vector<std::string> tokens;
  std::vector<std::int64_t> types;
  std::vector<double> scores;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto it = by_id.find(i);
    if (it == by_id.end()) {
      tokens.push_back("[PAD" + std::to_string(i) + "]");
      types.push_back(kUnused);
      scores.push_back(-10000.0);
      continue;
    }
    const std::string& t = it->second;
    tokens.push_back(t);
    const auto a = added_special.find(i);
    const bool is_byte = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>';
    types.push_back(t == unk                   ? kUnknown
                    : a != added_special.end() ? (a->second ? kControl : kUser)
                    : is_byte                  ? kByte
                                               : kNormal);
    if (types.back() != kNormal)
      scores.push_back(0.0);
    else if (const auto r = first_rank.find(t); r != first_rank.end())
      scores.push_back(-static_cast<double>(r->second));
    else
      scores.push_back(-static_cast<double>(merges.size()) - static_cast<double>(i));
  }
  for (const auto& [key, data] : cfg["added_tokens_decoder"].items()) {
    const auto id = static_cast<std::size_t>(std::stoll(key));
    if (id >= tokens.size())
      continue;
    std::string content = data["content"].get<std::string>();
    if (data.value("special", false) || looks_special(content)) {
      types[id] = kControl;
    } else {
      types[id] = kUser;
      content = spaces_for_marker(content);
    }
    scores[id] = -1000.0;
    tokens[id] = content;
  }
  Converted c;
  c.md["tokenizer.ggml.model"] = gguf_string("llama");
  c.md["tokenizer.ggml.pre"] = gguf_string("default");
  c.md["tokenizer.ggml.tokens"] = gguf_array(GgufValueType::string, tokens);
  c.md["tokenizer.ggml.scores"] = gguf_array(GgufValueType::f32, scores);
  c.md["tokenizer.ggml.token_type"] = gguf_array(GgufValueType::i32, types);
  if (add_space_prefix)
    c.md["tokenizer.ggml.add_space_prefix"] = gguf_bool(*add_space_prefix);
  special_vocab(tj, cfg, c.md);
  return c;
}

Tokenizer load_gguf_tokenizer(const Metadata& md) {
  const auto files = text_files_from_gguf(md, "model.gguf");
  REQUIRE(!files.empty());
  return Tokenizer::from_json(files.tokenizer_json, files.tokenizer_config_json,
                              files.generation_config_json);
}

std::vector<json> gguf_oracle(const std::string& name) {
  std::ifstream f(oracle_dir() / (name + ".jsonl"));
  REQUIRE(f.good());
  std::vector<json> out;
  for (std::string line; std::getline(f, line);)
    if (!line.empty())
      out.push_back(json::parse(line));
  return out;
}

std::string gguf_show(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Every oracle record: ids, decode and decode skipping special tokens equal HF's. `gguf_bos`:
// the GGUF adds this BOS where the Rust tokenizer.json does not (its add_bos_token says so, or
// llama.cpp's default for the pre-tokenizer applies), so the expected ids with special tokens are
// HF's with it in front.
void check_oracle(const std::string& name, const Converted& c,
                  std::optional<std::int32_t> gguf_bos = std::nullopt) {
  const Tokenizer tok = load_gguf_tokenizer(c.md);
  const auto records = gguf_oracle(name);
  REQUIRE(records.size() >= 700);
  int bad = 0;
  std::size_t skip_checked = 0;
  std::ostringstream first;
  const auto fail = [&](const char* what, const json& rec, const json& got) {
    if (++bad <= 5)
      first << name << " " << what << " of " << gguf_show(rec["text"])
            << " add_special=" << rec["add_special"] << "\n  expected " << gguf_show(rec[what])
            << "\n  got      " << gguf_show(got) << "\n";
  };
  for (const auto& rec : records) {
    const std::string text = rec["text"].get<std::string>();
    const bool add = rec["add_special"].get<bool>();
    auto expected = rec["ids"].get<std::vector<std::int32_t>>();
    const auto ids = tok.encode(text, add);
    auto want = expected;
    if (add && gguf_bos)
      want.insert(want.begin(), *gguf_bos);
    if (ids != want)
      fail("ids", rec, ids);
    if (tok.decode(expected, false) != rec["decoded"].get<std::string>())
      fail("decoded", rec, tok.decode(expected, false));
    // A token HF keeps as non-special but the converter marks CONTROL is skipped here.
    bool comparable = true;
    for (const auto id : expected)
      comparable = comparable && !c.special_only_in_gguf.count(id);
    if (comparable) {
      ++skip_checked;
      if (tok.decode(expected, true) != rec["decoded_skip"].get<std::string>())
        fail("decoded_skip", rec, tok.decode(expected, true));
    }
  }
  INFO(first.str());
  CHECK(bad == 0);
  CHECK(skip_checked * 10 >= records.size() * 9);
}

// Qwen3's GGUF text files: eos ids, no BOS, and every qwen3 case of the chat oracle rendered
// byte-equal (tests/data/text/chat/expected_jinja2.jsonl).
void check_qwen3_chat(const tpullm::frontend::TextFiles& files) {
  const Tokenizer tok = Tokenizer::from_json(files.tokenizer_json, files.tokenizer_config_json,
                                             files.generation_config_json);
  CHECK(tok.config().eos_token_ids == std::vector<std::int32_t>{151645, 151643});
  CHECK(tok.config().add_bos_token == false);
  CHECK(tok.vocab_size() == 151669); // the [PADn] rows have no token
  const auto tpl = tpullm::text::ChatTemplate::parse(tok.config().chat_template);

  const auto data = std::filesystem::path(TPULLM_TEST_DATA_DIR) / "text" / "chat";
  std::ifstream cf(data / "cases.json");
  REQUIRE(cf.good());
  // Insertion-ordered, as transformers' dicts: tojson prints the tools' keys in file order.
  const auto cases = nlohmann::ordered_json::parse(cf);
  std::map<std::string, nlohmann::ordered_json> convs;
  for (const auto& conv : cases["conversations"])
    convs[conv["name"].get<std::string>()] = conv;
  const auto& tools = cases["tools"];
  std::ifstream f(data / "expected_jinja2.jsonl");
  REQUIRE(f.good());
  // What transformers passes: the config's special-token strings (none of them is used by the
  // Qwen3 template).
  const std::map<std::string, std::string> special{{"eos_token", tok.config().eos_token},
                                                   {"pad_token", tok.config().pad_token}};
  int rendered = 0;
  for (std::string line; std::getline(f, line);) {
    const auto rec = nlohmann::ordered_json::parse(line);
    if (rec["target"] != "qwen3")
      continue;
    const auto& conv = convs.at(rec["conv"].get<std::string>());
    const bool agp = rec["variant"].value("add_generation_prompt", false);
    const auto ctx = tpullm::text::ChatTemplate::make_context(
        conv["messages"], conv.value("use_tools", false) ? tools : nlohmann::ordered_json(), agp,
        special, rec["variant"]);
    INFO(rec["conv"].get<std::string>() << " / " << rec["variant"].dump());
    if (rec.contains("text")) {
      CHECK(tpl.render(ctx) == rec["text"].get<std::string>());
      ++rendered;
    } else {
      CHECK_THROWS_AS(tpl.render(ctx), Error);
    }
  }
  CHECK(rendered >= 10);
}

std::string message_of(const Metadata& md) {
  try {
    text_files_from_gguf(md, "model.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

Metadata tiny_gpt2() {
  Metadata md;
  md["tokenizer.ggml.model"] = gguf_string("gpt2");
  md["tokenizer.ggml.pre"] = gguf_string("default");
  md["tokenizer.ggml.tokens"] =
      gguf_array(GgufValueType::string, std::vector<std::string>{"a", "b", "ab", "<|end|>"});
  md["tokenizer.ggml.token_type"] =
      gguf_array(GgufValueType::i32, std::vector<std::int64_t>{1, 1, 1, 3});
  md["tokenizer.ggml.merges"] = gguf_array(GgufValueType::string, std::vector<std::string>{"a b"});
  md["tokenizer.ggml.eos_token_id"] = gguf_u32(3);
  return md;
}

} // namespace

// The padded Qwen3 vocabulary and llama3_1 (the same pre-tokenizer as llama3) run in the Release
// tree only: under the sanitizers they repeat what the shared Qwen3-tokenizer GGUF case and the
// llama3 case already cover (4.9 s and 6.8 s there).
TEST_CASE("gguf qwen3 (gpt2, pre qwen2, padded as the shared GGUF) equals HF",
          "[text][gguf][release-only]") {
  auto c = convert_gpt2("qwen3", "qwen2", 151936);
  // The shared qwen2-qwen3tok GGUF also carries bos 151643 (from config.json).
  c.md["tokenizer.ggml.bos_token_id"] = gguf_u32(151643);
  check_oracle("qwen3", c);
}
TEST_CASE("gguf llama3 (gpt2, pre llama-bpe) equals HF", "[text][gguf]") {
  // No add_bos_token in the files: llama.cpp adds BOS for llama-bpe, the Rust file does not.
  check_oracle("llama3", convert_gpt2("llama3", "llama-bpe", 0), 128000);
}
TEST_CASE("gguf llama3_1 (gpt2, pre llama-bpe) equals HF", "[text][gguf][release-only]") {
  check_oracle("llama3_1", convert_gpt2("llama3_1", "llama-bpe", 0));
}
TEST_CASE("gguf deepseek_v3 (gpt2, pre deepseek-v3) equals HF", "[text][gguf]") {
  // tokenizer_config.json says add_bos_token true (as transformers' Python tokenizer does); the
  // Rust tokenizer.json's post-processor adds none.
  check_oracle("deepseek_v3", convert_gpt2("deepseek_v3", "deepseek-v3", 0), 0);
}
TEST_CASE("gguf gpt-oss (gpt2, pre gpt-4o) equals HF", "[text][gguf][release-only]") {
  check_oracle("gptoss", convert_gpt2("gptoss", "gpt-4o", 0));
}
TEST_CASE("gguf llama2 / Mistral (llama, scores, byte fallback) equals HF", "[text][gguf]") {
  check_oracle("llama2", convert_spm("llama2", std::nullopt));
}
// The two largest vocabularies (262k and 200k pieces) run in the Release tree only
// ([release-only], tests/CMakeLists.txt): 28 s each under the sanitizers, 4 s in Release; the
// sanitizer tree keeps the other GGUF vocabulary cases, which go through the same conversion.
TEST_CASE("gguf gemma3 (llama, no space prefix) equals HF", "[text][gguf][release-only]") {
  check_oracle("gemma3", convert_spm("gemma3", false));
}

TEST_CASE("gguf qwen3 metadata renders the chat oracle and stops at Qwen's eos", "[text][gguf]") {
  auto c = convert_gpt2("qwen3", "qwen2", 151936);
  c.md["tokenizer.ggml.bos_token_id"] = gguf_u32(151643);
  check_qwen3_chat(text_files_from_gguf(c.md, "model.gguf"));
}

// ../shared/models-gguf/qwen2-qwen3tok-q8_0 embeds Qwen3's real tokenizer as llama.cpp's gguf-py
// wrote it: read with the GGUF reader, it must give the same files as the conversion above, HF's
// ids on every qwen3 oracle case and the chat oracle's renders. Skipped without ../shared.
TEST_CASE("the shared Qwen3-tokenizer GGUF gives HF's ids and the chat oracle", "[text][gguf]") {
  const auto path = shared_dir() / "models-gguf" / "qwen2-qwen3tok-q8_0" / "model.gguf";
  if (!std::filesystem::is_regular_file(path)) {
    WARN("skipped: no " << path.string());
    return;
  }
  const auto gguf = tpullm::frontend::GgufFile::open(path);
  const auto files = text_files_from_gguf(gguf.metadata(), path.string());
  auto c = convert_gpt2("qwen3", "qwen2", 151936);
  c.md["tokenizer.ggml.bos_token_id"] = gguf_u32(151643);
  const auto emulated = text_files_from_gguf(c.md, "model.gguf");
  CHECK(files.tokenizer_json == emulated.tokenizer_json);
  CHECK(files.tokenizer_config_json == emulated.tokenizer_config_json);
  CHECK(files.generation_config_json == emulated.generation_config_json);
  c.md = gguf.metadata();
  check_oracle("qwen3", c);
  check_qwen3_chat(files);
}

// The small GGUFs of tests/data/models-gguf carry a synthetic byte-level vocabulary (pre
// "default", bos / eos / pad control tokens): their tokenizer loads and round-trips text.
TEST_CASE("the test GGUFs' tokenizers load and round-trip text", "[text][gguf]") {
  int seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(
           std::filesystem::path(TPULLM_TEST_DATA_DIR) / "models-gguf")) {
    const auto path = e.path() / "model.gguf";
    if (!std::filesystem::is_regular_file(path))
      continue;
    ++seen;
    INFO(path.string());
    const auto gguf = tpullm::frontend::GgufFile::open(path);
    const auto files = text_files_from_gguf(gguf.metadata(), path.string());
    REQUIRE(!files.empty());
    const auto tok = Tokenizer::from_json(files.tokenizer_json, files.tokenizer_config_json,
                                          files.generation_config_json);
    CHECK(tok.vocab_size() == 1024);
    const std::string text = "Hello, world! 123 \xC3\xA9t\xC3\xA9 <|eos|>";
    const auto ids = tok.encode(text, true);
    CHECK(tok.decode(ids, false) == text);
    CHECK(ids.back() == 1022);
    CHECK(tok.config().eos_token_ids == std::vector<std::int32_t>{1022});
  }
  CHECK(seen >= 5);
}

TEST_CASE("gguf tokenizer: a small gpt2 vocabulary round-trips", "[text][gguf]") {
  const auto files = text_files_from_gguf(tiny_gpt2(), "model.gguf");
  const auto tok = Tokenizer::from_json(files.tokenizer_json, files.tokenizer_config_json,
                                        files.generation_config_json);
  CHECK(tok.encode("ab<|end|>ba", true) == std::vector<std::int32_t>{2, 3, 1, 0});
  CHECK(tok.is_special(3));
  CHECK(tok.decode(std::vector<std::int32_t>{2, 3}, true) == "ab");
  CHECK(tok.config().eos_token_ids == std::vector<std::int32_t>{3});
  Metadata none;
  CHECK(text_files_from_gguf(none, "model.gguf").empty());
}

// Every pre-tokenizer name docs/text.md lists compiles its regexes and splits text (the four
// families with real files are checked against HF above).
TEST_CASE("gguf tokenizer: every supported pre-tokenizer loads and encodes", "[text][gguf]") {
  for (const char* pre : {"default",
                          "llama3",
                          "llama-v3",
                          "llama-bpe",
                          "falcon3",
                          "falcon-h1",
                          "pixtral",
                          "dbrx",
                          "smaug-bpe",
                          "chatglm-bpe",
                          "glm4",
                          "qwen2",
                          "deepseek-r1-qwen",
                          "stablelm2",
                          "deepseek-v3",
                          "deepseek-llm",
                          "deepseek-coder",
                          "gpt-2",
                          "phi-2",
                          "mpt",
                          "olmo",
                          "jais",
                          "falcon",
                          "starcoder",
                          "refact",
                          "command-r",
                          "smollm",
                          "codeshell",
                          "exaone",
                          "minerva-7b",
                          "poro-chat",
                          "bloom",
                          "gpt3-finnish",
                          "viking",
                          "tekken",
                          "gpt-4o",
                          "llama4"}) {
    INFO(pre);
    auto md = tiny_gpt2();
    md["tokenizer.ggml.pre"] = gguf_string(pre);
    md["tokenizer.ggml.bos_token_id"] = gguf_u32(3); // the llama-bpe family adds BOS by default
    const auto files = text_files_from_gguf(md, "model.gguf");
    const auto tok = Tokenizer::from_json(files.tokenizer_json, files.tokenizer_config_json,
                                          files.generation_config_json);
    CHECK(tok.encode("ab ba, 1234 ab\n", false).size() >= 2);
    CHECK(tok.encode("ab", false) == std::vector<std::int32_t>{2});
  }
}

TEST_CASE("gguf tokenizer: a small llama vocabulary merges by score", "[text][gguf]") {
  Metadata md;
  const std::string sp = "\xE2\x96\x81";
  md["tokenizer.ggml.model"] = gguf_string("llama");
  md["tokenizer.ggml.tokens"] =
      gguf_array(GgufValueType::string,
                 std::vector<std::string>{"<unk>", "<s>", "</s>", sp, "a", "b", sp + "a", "ab",
                                          sp + "ab", std::string(5000, 'a')});
  md["tokenizer.ggml.scores"] =
      gguf_array(GgufValueType::f32, std::vector<double>{0, 0, 0, -1, -2, -3, -4, -5, -6, -7});
  md["tokenizer.ggml.token_type"] =
      gguf_array(GgufValueType::i32, std::vector<std::int64_t>{2, 3, 3, 1, 1, 1, 1, 1, 1, 1});
  const auto files = text_files_from_gguf(md, "model.gguf");
  const auto tok = Tokenizer::from_json(files.tokenizer_json, files.tokenizer_config_json,
                                        files.generation_config_json);
  // "▁a" (score -4) merges first, then "▁a" + "b" makes "▁ab"; BOS 1 added by default; the
  // 5000-byte piece gets no merges.
  CHECK(tok.encode("ab", true) == std::vector<std::int32_t>{1, 8});
  CHECK(tok.encode("ba", false) == std::vector<std::int32_t>{3, 5, 4});
  CHECK(tok.decode(std::vector<std::int32_t>{1, 8, 6}, true) == "ab a");
  CHECK(tok.config().eos_token_ids == std::vector<std::int32_t>{2});
}

TEST_CASE("gguf tokenizer metadata that cannot be used is refused in one line", "[text][gguf]") {
  const auto refused = [](const Metadata& md, const std::string& part) {
    const std::string msg = message_of(md);
    INFO(msg);
    CHECK(msg.find(part) != std::string::npos);
    CHECK(msg.find("model.gguf") != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  };
  for (const char* model : {"bert", "t5", "rwkv"}) {
    auto md = tiny_gpt2();
    md["tokenizer.ggml.model"] = gguf_string(model);
    refused(md, std::string("unsupported: model.gguf: tokenizer.ggml.model '") + model +
                    "' is not supported");
  }
  {
    auto md = tiny_gpt2();
    md["tokenizer.ggml.pre"] = gguf_string("no-such-pre");
    refused(md, "unsupported: model.gguf: tokenizer.ggml.pre 'no-such-pre' is not supported");
  }
  {
    auto md = tiny_gpt2();
    md.erase("tokenizer.ggml.tokens");
    refused(md, "invalid input: model.gguf: tokenizer.ggml.tokens: missing");
  }
  {
    auto md = tiny_gpt2();
    md["tokenizer.ggml.tokens"] = gguf_u32(4);
    refused(md, "tokenizer.ggml.tokens: expected an array");
  }
  {
    auto md = tiny_gpt2();
    md["tokenizer.ggml.token_type"] =
        gguf_array(GgufValueType::i32, std::vector<std::int64_t>{1, 1, 1});
    refused(md, "tokenizer.ggml.token_type: has 3 entries but tokenizer.ggml.tokens has 4");
  }
  {
    auto md = tiny_gpt2();
    md["tokenizer.ggml.token_type"] =
        gguf_array(GgufValueType::i32, std::vector<std::int64_t>{1, 1, 9, 3});
    refused(md, "tokenizer.ggml.token_type[2]: 9 is not a token type");
  }
  {
    auto md = tiny_gpt2();
    md["tokenizer.ggml.model"] = gguf_string("llama");
    md["tokenizer.ggml.scores"] = gguf_array(GgufValueType::f32, std::vector<double>{0, 0});
    refused(md, "tokenizer.ggml.scores: has 2 entries but tokenizer.ggml.tokens has 4");
    md.erase("tokenizer.ggml.scores");
    refused(md, "tokenizer.ggml.scores: missing");
  }
  {
    auto md = tiny_gpt2();
    md["tokenizer.ggml.eos_token_id"] = gguf_u32(7);
    refused(md, "tokenizer.ggml.eos_token_id: id 7 is outside the vocabulary of 4 tokens");
  }
  {
    auto md = tiny_gpt2();
    md["tokenizer.ggml.merges"] =
        gguf_array(GgufValueType::string, std::vector<std::string>{"a b", "ab zz"});
    refused(md, "tokenizer.ggml.merges[1]: 'zz' is not a token");
    md["tokenizer.ggml.merges"] = gguf_array(GgufValueType::string, std::vector<std::string>{"ab"});
    refused(md, "tokenizer.ggml.merges[0]: expected two tokens split by a space");
    md.erase("tokenizer.ggml.merges");
    refused(md, "tokenizer.ggml.merges: missing");
  }
  {
    auto md = tiny_gpt2();
    md["tokenizer.ggml.tokens"] =
        gguf_array(GgufValueType::string, std::vector<std::string>{"a", "b", "a", "<|end|>"});
    refused(md, "tokenizer.ggml.tokens: 'a' appears at ids 0 and 2");
  }
  {
    auto md = tiny_gpt2();
    md["tokenizer.ggml.add_bos_token"] = gguf_bool(true);
    refused(md, "tokenizer.ggml.add_bos_token: is true but tokenizer.ggml.bos_token_id is not set");
  }
}
