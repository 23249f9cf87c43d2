// tpullm tokenize TOKENIZER_DIR|BUNDLE [--text T | --decode IDS]: the ids and pieces of a text
// (standard input without --text), or the text of ids, through a checkpoint's tokenizer.json.
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "tpullm/support/input_file.hpp"
#include "tpullm/text/tokenizer.hpp"

namespace tpullm::cli {
namespace {

std::string dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

text::Tokenizer open_tokenizer(const std::string& source) {
  std::error_code ec;
  if (std::filesystem::is_directory(source, ec))
    return text::Tokenizer::from_dir(source);
  if (std::filesystem::exists(source, ec))
    throw_error(ErrorKind::unsupported, source, "bundle has no tokenizer (not yet stored)");
  throw_error(ErrorKind::io, source, "no such tokenizer directory or bundle");
}

} // namespace

int cmd_tokenize(const std::vector<std::string>& args) {
  std::string source, text_arg, decode_arg;
  bool no_special = false, skip_special = false, json = false;
  po::options_description o("tpullm tokenize TOKENIZER_DIR|BUNDLE [--text T | --decode IDS] "
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
      "json", po::bool_switch(&json), "print one JSON object (ids, pieces, text)");
  po::positional_options_description pos;
  pos.add("source", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(o).positional(pos).style(kOptionStyle).run(), vm);
  if (vm.count("help")) {
    std::cout << o;
    return kOk;
  }
  po::notify(vm);
  const bool decoding = vm.count("decode") > 0;
  check(!(decoding && vm.count("text")), ErrorKind::invalid_input, "--decode",
        "cannot be combined with --text");
  check(!(decoding && no_special), ErrorKind::invalid_input, "--no-special",
        "applies to encoding, not to --decode");
  check(decoding || !skip_special, ErrorKind::invalid_input, "--skip-special",
        "applies only with --decode");
  const text::Tokenizer tok = open_tokenizer(source);

  nlohmann::ordered_json out;
  std::vector<std::int32_t> ids;
  if (decoding) {
    ids = parse_id_list<std::int32_t>(decode_arg, "--decode");
    for (const auto id : ids)
      check(id >= 0 && id < tok.vocab_size(), ErrorKind::invalid_input, "--decode", "token id ", id,
            " is outside the vocabulary (size ", tok.vocab_size(), ")");
  } else {
    const std::string input = vm.count("text") ? text_arg : read_stdin();
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
