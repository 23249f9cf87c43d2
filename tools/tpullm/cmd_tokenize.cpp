// tpullm tokenize TOKENIZER_DIR|BUNDLE [--text T | --decode IDS | --chat MESSAGES.json]: the ids
// and pieces of a text (standard input without --text), the text of ids, or a conversation
// rendered through the chat template and tokenized, with a checkpoint's or a bundle's tokenizer.
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "sampling_options.hpp"
#include "tpullm/runtime/text_side.hpp"
#include "tpullm/support/input_file.hpp"
#include "tpullm/support/json.hpp"
#include "tpullm/text/chat_template.hpp"
#include "tpullm/text/tokenizer.hpp"

namespace tpullm::cli {
namespace {

/// Most bytes `tokenize` reads as text (standard input or --text): encoding holds about 40 bytes
/// per input byte at its peak (ids, pieces, the JSON output), so 16 MiB peaks near 700 MB.
constexpr std::size_t kMaxTokenizeBytes = std::size_t{16} << 20;
/// Most bytes of a --chat messages file (or its standard input).
constexpr std::size_t kMaxMessagesBytes = std::size_t{64} << 20;

std::string dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// The tokenizer and chat template of a checkpoint folder or a bundle.
struct TextTools {
  text::Tokenizer tok;
  std::optional<text::ChatTemplate> tmpl;
};

TextTools open_text(const std::string& source, bool no_mmap) {
  std::error_code ec;
  if (std::filesystem::is_directory(source, ec)) {
    TextTools t{text::Tokenizer::from_dir(source), std::nullopt};
    if (!t.tok.config().chat_template.empty())
      t.tmpl = text::ChatTemplate::parse(t.tok.config().chat_template);
    return t;
  }
  if (!std::filesystem::exists(source, ec))
    throw_error(ErrorKind::io, source, "no such tokenizer directory or bundle");
  auto side = runtime::load_text_side(
      *bundle::Bundle::open(source, no_mmap ? FileAccess::read : FileAccess::map), source);
  return {std::move(side.tokenizer), std::move(side.chat_template)};
}

/// --chat's file: a JSON list of messages, or an object with "messages" (and "tools"), as in an
/// OpenAI request.
std::pair<nlohmann::ordered_json, nlohmann::ordered_json> read_conversation(const std::string& f) {
  const std::string text =
      f == "-" ? read_stdin(kMaxMessagesBytes) : read_regular_file(f, kMaxMessagesBytes);
  nlohmann::ordered_json j = parse_ordered_json(text, f, "is not JSON");
  nlohmann::ordered_json tools = nullptr;
  if (j.is_object()) {
    check(j.contains("messages"), ErrorKind::invalid_input, f,
          "an object needs a \"messages\" list");
    if (j.contains("tools"))
      tools = j["tools"];
    j = j["messages"];
  }
  check(j.is_array(), ErrorKind::invalid_input, f, "must be a list of messages");
  for (const auto& m : j)
    check(m.is_object() && m.contains("role") && m["role"].is_string(), ErrorKind::invalid_input, f,
          "each message must be an object with a string \"role\"");
  check(tools.is_null() || tools.is_array(), ErrorKind::invalid_input, f,
        "\"tools\" must be a list");
  return {std::move(j), std::move(tools)};
}

} // namespace

int cmd_tokenize(const std::vector<std::string>& args) {
  std::string source, text_arg, decode_arg, chat_file, kwargs_text = "{}";
  bool no_special = false, skip_special = false, json = false, no_gen_prompt = false;
  po::options_description o(
      "tpullm tokenize TOKENIZER_DIR|BUNDLE [--text T | --decode IDS | --chat FILE] "
      "[options]\n(without --text or --decode, all of standard input is "
      "the text)");
  o.add_options()("help,h", "show this help")(
      "source", po::value(&source)->required(),
      "a folder with tokenizer.json (+ tokenizer_config.json), or a bundle")(
      "text", po::value(&text_arg), "the text to tokenize")(
      "no-special", po::bool_switch(&no_special),
      "leave out the post-processor's special tokens (default: added, as HF's "
      "add_special_tokens=True)")("decode", po::value(&decode_arg),
                                  "print the text of these ids (comma-separated)")(
      "skip-special", po::bool_switch(&skip_special), "with --decode: leave out special tokens")(
      "chat", po::value(&chat_file),
      "render a conversation through the chat template and tokenize it (special tokens as the "
      "template writes them): FILE (- for standard input) holds a JSON list of messages, or an "
      "object with \"messages\" and \"tools\"")(
      "no-generation-prompt", po::bool_switch(&no_gen_prompt),
      "with --chat: do not end with the assistant's generation prompt")(
      "template-kwargs", po::value(&kwargs_text),
      "with --chat: extra template variables, a JSON object (e.g. '{\"enable_thinking\": false}')")(
      "json", po::bool_switch(&json),
      "print one JSON object (ids, pieces, and text for --decode "
      "and --chat)");
  bool no_mmap = false;
  o.add(bundle_read_options(no_mmap));
  po::variables_map vm;
  if (!parse_command_line(args, o, "source", vm))
    return kOk;
  const bool decoding = vm.count("decode") > 0, chatting = vm.count("chat") > 0;
  check(!(chatting && (decoding || vm.count("text") || no_special)), ErrorKind::invalid_input,
        "--chat", "cannot be combined with --text, --decode or --no-special");
  check(chatting || (!no_gen_prompt && !vm.count("template-kwargs")), ErrorKind::invalid_input,
        vm.count("template-kwargs") ? "--template-kwargs" : "--no-generation-prompt",
        "applies only with --chat");
  check(!(decoding && vm.count("text")), ErrorKind::invalid_input, "--decode",
        "cannot be combined with --text");
  check(!(decoding && no_special), ErrorKind::invalid_input, "--no-special",
        "applies to encoding, not to --decode");
  check(decoding || !skip_special, ErrorKind::invalid_input, "--skip-special",
        "applies only with --decode");
  const auto kwargs = parse_json_object(kwargs_text, "--template-kwargs");
  const TextTools tt = open_text(source, no_mmap);
  const text::Tokenizer& tok = tt.tok;

  nlohmann::ordered_json out;
  std::vector<std::int32_t> ids;
  if (decoding) {
    ids = parse_id_list<std::int32_t>(decode_arg, "--decode");
    for (const auto id : ids)
      check(id >= 0 && id < tok.vocab_size(), ErrorKind::invalid_input, "--decode", "token id ", id,
            " is outside the vocabulary (size ", tok.vocab_size(), ")");
  } else if (chatting) {
    check(tt.tmpl.has_value(), ErrorKind::unsupported, source,
          "no chat template: ", tt.tok.config().no_chat_template_reason());
    const auto [messages, tools] = read_conversation(chat_file);
    const auto special = runtime::template_special_tokens(tok);
    const std::string rendered = tt.tmpl->render(
        text::ChatTemplate::make_context(messages, tools, !no_gen_prompt, special, kwargs));
    ids = tok.encode(rendered, false);
    if (!json) {
      std::cout << rendered << "\n";
      std::cout << "ids: ";
      for (std::size_t i = 0; i < ids.size(); ++i)
        std::cout << (i ? "," : "") << ids[i];
      std::cout << "\ntokens: " << ids.size() << "\n";
      return kOk;
    }
    out["text"] = rendered;
  } else {
    check(text_arg.size() <= kMaxTokenizeBytes, ErrorKind::invalid_input, "--text", "is ",
          text_arg.size(), " bytes, more than tokenize's ", kMaxTokenizeBytes, " (split the text)");
    const std::string input = vm.count("text") ? text_arg : read_stdin(kMaxTokenizeBytes);
    ids = tok.encode(input, !no_special);
  }
  const auto pieces = tok.pieces(ids);
  if (json) {
    out["ids"] = ids;
    out["pieces"] = pieces;
    if (decoding)
      out["text"] = tok.decode(ids, skip_special);
    std::cout << dump(out) << "\n";
    return kOk;
  }
  if (decoding) {
    std::cout << tok.decode(ids, skip_special) << "\n";
    return kOk;
  }
  std::cout << "ids: ";
  for (std::size_t i = 0; i < ids.size(); ++i)
    std::cout << (i ? "," : "") << ids[i];
  std::cout << "\npieces: " << dump(pieces) << "\ntokens: " << ids.size() << "\n";
  return kOk;
}

} // namespace tpullm::cli
