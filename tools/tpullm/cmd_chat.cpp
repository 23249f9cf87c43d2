// tpullm chat FILE.bundle: a multi-turn conversation in text. Each turn is rendered through the
// bundle's chat template and only the tokens its KV cache does not hold yet are fed (prefill_kv
// onto the kept cache: the paper's scenario 2); the answer streams to stdout as it is generated.
#include <iomanip>
#include <optional>
#include <iostream>
#include <sstream>

#include <unistd.h>

#include "bundle_source.hpp"
#include "command.hpp"
#include "pipeline_run.hpp"
#include "tpullm/support/input_file.hpp"
#include "tpullm/support/output_file.hpp"
#include "tpullm/support/json.hpp"
#include "sampling_options.hpp"
#include "tpullm/runtime/conversation.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/text_side.hpp"

namespace tpullm::cli {

namespace {

/// Per-turn figures on stderr: what was fed, what was reused, time to first token, speed.
void print_stats(int turn, const runtime::TurnResult& r, const runtime::GenerateOptions& opts) {
  const auto& g = r.generated.result;
  const double decoded = static_cast<double>(g.tokens.size()) - 1;
  std::cerr << std::fixed << std::setprecision(1) << "[turn " << turn << ": " << g.prompt_tokens
            << " prompt tokens prefilled, " << r.generated.reused << " reused from the KV cache; "
            << "time to first token " << g.prefill_seconds * 1e3 << " ms; " << g.tokens.size()
            << " tokens, decode "
            << (decoded > 0 && g.decode_seconds > 0 ? decoded / g.decode_seconds : 0.0)
            << " tokens/s; stopped: " << runtime::to_string(g.reason);
  if (const auto spec = describe_speculation(opts, g); !spec.empty())
    std::cerr << "; " << spec;
  std::cerr << "]\n";
}

} // namespace

int cmd_chat(const std::vector<std::string>& args) {
  std::string system, kwargs_text = "{}", overflow_text = "refuse";
  runtime::GenerateOptions g;
  BundleArgs source;
  bool no_stats = false;
  po::options_description o("tpullm chat BUNDLE [options]\n\n"
                            "BUNDLE: a bundle file, a checkpoint folder or a .gguf file. "
                            "Reads user turns from standard input, one per line (interactive on a "
                            "terminal; /reset forgets the conversation, /exit or end of input "
                            "quits). Piped input that is a JSON list of messages is answered "
                            "once.\n\noptions");
  o.add_options()("help,h", "show this help")("system", po::value(&system),
                                              "system message put first in the conversation")(
      "template-kwargs", po::value(&kwargs_text),
      "extra chat-template variables, a JSON object (e.g. '{\"enable_thinking\": false}')")(
      "no-stats", po::bool_switch(&no_stats), "do not print the per-turn figures on stderr")(
      "context-overflow", po::value(&overflow_text),
      "refuse | truncate-middle: when a turn would leave too little room for the answer "
      "(-n tokens, at most half the sequence length), refuse it (default) or drop the "
      "earliest turns after the system message until it fits (said on stderr)");
  o.add(sampling_options(g));
  o.add(constraint_options(g));
  DraftArgs draft;
  o.add(speculation_options(draft));
  ParallelArgs parallel;
  o.add(parallel_options(parallel));
  po::variables_map vm;
  if (!parse_bundle_command(args, o, source, vm))
    return kOk;
  const auto kwargs = parse_json_object(kwargs_text, "--template-kwargs");
  const auto overflow = runtime::parse_context_overflow(overflow_text, "--context-overflow");

  std::string checked;
  CommandEngine ce(parallel, source, args, !no_stats, &checked);
  if (ce.layer_rank())
    return ce.serve_layers();
  runtime::BundleSession& engine = ce.engine();
  const std::string& file = source.source;
  const auto drafts = apply_draft(draft, engine.bundle(), source.open, source.threads, g);
  share_draft_workers(drafts, engine.executor());
  const auto text = runtime::load_text_side(engine.bundle(), file);
  check(text.chat_template.has_value(), ErrorKind::unsupported, file,
        "no chat template: ", text.tokenizer.config().no_chat_template_reason(),
        "; use tpullm run --prompt for raw text");
  g.stop.eos_ids = text.stop_ids;
  const std::string sampling =
      apply_generation_defaults(vm, text.tokenizer.config().generation_defaults, g);
  g.stop.validate();
  runtime::PromptCache cache(engine.session());
  runtime::Conversation chat(cache, text.tokenizer, &*text.chat_template, system, kwargs);
  // Never silent: the dropped turns are named before the answer that needed their room.
  chat.set_context_overflow(overflow, [](const runtime::Truncation& t) {
    std::cerr << "[context full: the " << t.dropped_messages << " earliest message"
              << (t.dropped_messages == 1 ? "" : "s") << " (" << t.dropped_tokens
              << " tokens) left out to make room for the answer; system messages and the last "
                 "turn kept]\n";
  });
  const bool interactive = ::isatty(STDIN_FILENO) != 0;
  const auto& m = engine.bundle().model();
  // Piped input is read and checked before anything is printed, so a refusal is one line.
  std::string all;
  std::optional<nlohmann::ordered_json> messages;
  if (!interactive) {
    all = read_stdin(std::size_t{64} << 20); // a messages list, as --chat files of tokenize
    const auto first = all.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && all[first] == '[') {
      messages = parse_ordered_json(all, "standard input",
                                    "starts with '[' but is not a JSON list of messages");
      chat.set_messages(std::move(*messages));
    }
  }
  if (!no_stats)
    std::cerr << "chatting with " << file << " (" << m.family << " '" << m.source << "', mode "
              << m.mode << ", seq_length " << m.params.seq_length << "; " << sampling << "; "
              << checked << ")" << (interactive ? "; /reset starts over, /exit quits" : "") << "\n";
  // An answer that cannot be written stops the conversation at once (nothing more is generated).
  auto sink = [](std::string_view piece) {
    std::cout << piece << std::flush;
    if (!std::cout)
      throw OutputError("<stdout>", "write failed");
  };
  int turn = 0, refused = 0;
  auto run_turn = [&](auto&& step) {
    try {
      const auto r = step();
      std::cout << "\n" << std::flush;
      if (!no_stats)
        print_stats(++turn, r, g);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::invalid_input)
        throw;
      ++refused;
      // /reset is a line of the conversation: it means nothing to a piped list of messages.
      std::cerr << "tpullm chat: " << e.what()
                << (messages      ? ""
                    : interactive ? " (type /reset to start over)"
                                  : " (a /reset line starts over)")
                << "\n";
    }
  };

  if (!interactive) {
    if (messages) {
      run_turn([&] { return chat.answer(g, sink); });
      return refused ? kBadInput : ce.peak_within_budget(std::cerr) ? kOk : kCheckFailed;
    }
    std::istringstream lines(all);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty() && line.back() == '\r')
        line.pop_back();
      if (line == "/exit")
        break;
      if (line == "/reset") {
        chat.reset();
        continue;
      }
      if (line.find_first_not_of(" \t") == std::string::npos)
        continue;
      run_turn([&] { return chat.say(line, g, sink); });
    }
    return refused ? kBadInput : ce.peak_within_budget(std::cerr) ? kOk : kCheckFailed;
  }
  for (;;) {
    std::cerr << "> " << std::flush;
    std::string line;
    if (!std::getline(std::cin, line))
      break;
    if (line == "/exit")
      break;
    if (line == "/reset") {
      chat.reset();
      std::cerr << "(conversation forgotten)\n";
      continue;
    }
    if (line == "/help") {
      std::cerr << "/reset forgets the conversation, /exit quits; anything else is your turn\n";
      continue;
    }
    if (line.find_first_not_of(" \t") == std::string::npos)
      continue;
    run_turn([&] { return chat.say(line, g, sink); });
  }
  return ce.peak_within_budget(std::cerr) ? kOk : kCheckFailed;
}

} // namespace tpullm::cli
