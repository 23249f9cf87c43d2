// tpullm run FILE.bundle --prompt TEXT | --chat MESSAGE | --prompt-ids 1,2,3: generate from a
// compiled bundle; text answers stream to stdout as they are generated.
#include <iomanip>
#include <optional>
#include <iostream>

#include "bundle_source.hpp"
#include "command.hpp"
#include "pipeline_run.hpp"
#include "sampling_options.hpp"
#include "tpullm/runtime/conversation.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/text_side.hpp"

namespace tpullm::cli {

int cmd_run(const std::vector<std::string>& args) {
  std::string prompt_text, eos_text, raw_prompt, chat_message, system;
  runtime::GenerateOptions g;
  BundleArgs source;
  bool ignore_eos = false, quiet = false;
  po::options_description o(
      "tpullm run BUNDLE --prompt TEXT | --chat MESSAGE | --prompt-ids 1,2,3 [options]\n\n"
      "BUNDLE: a bundle file, a checkpoint folder or a .gguf file\n\noptions");
  o.add_options()("help,h", "show this help")(
      "prompt", po::value(&raw_prompt),
      "raw prompt text, tokenized with the bundle's tokenizer (its special tokens added, as HF's "
      "add_special_tokens=True); the continuation streams to stdout as text")(
      "chat", po::value(&chat_message),
      "one user message rendered through the bundle's chat template; the answer streams to "
      "stdout as text and stops at the end of the assistant's turn")(
      "system", po::value(&system), "with --chat: a system message before the user's")(
      "prompt-ids", po::value(&prompt_text),
      "prompt token ids, comma-separated; the generated ids are printed")(
      "eos-ids", po::value(&eos_text),
      "stop tokens, comma-separated (default: the model's eos_token_id list)")(
      "ignore-eos", po::bool_switch(&ignore_eos), "do not stop on eos tokens")(
      "quiet,q", po::bool_switch(&quiet), "print only the generated ids");
  o.add(sampling_options(g));
  o.add(constraint_options(g));
  DraftArgs draft;
  o.add(speculation_options(draft));
  ParallelArgs parallel;
  o.add(parallel_options(parallel));
  po::variables_map vm;
  if (!parse_bundle_command(args, o, source, vm))
    return kOk;

  const int given =
      static_cast<int>(vm.count("prompt") + vm.count("chat") + vm.count("prompt-ids"));
  check(given == 1, ErrorKind::invalid_input, "run",
        given == 0 ? "needs a prompt: --prompt TEXT, --chat MESSAGE or --prompt-ids 1,2,3"
                   : "takes one of --prompt, --chat and --prompt-ids");
  check(system.empty() || vm.count("chat"), ErrorKind::invalid_input, "--system",
        "applies only with --chat");
  const bool as_text = vm.count("prompt-ids") == 0;
  check(as_text || g.stop.stop_strings.empty(), ErrorKind::invalid_input, "--stop",
        "applies to text answers (--prompt, --chat), not to --prompt-ids");
  check(as_text || !g.grammar, ErrorKind::invalid_input, "--json-schema / --grammar / --json",
        "apply to text answers (--prompt, --chat), not to --prompt-ids");
  const auto prompt = as_text ? std::vector<std::int32_t>{}
                              : parse_id_list<std::int32_t>(prompt_text, "--prompt-ids");
  std::string checked;
  CommandEngine ce(parallel, source, args, !quiet, &checked);
  if (ce.layer_rank())
    return ce.serve_layers();
  runtime::BundleSession& engine = ce.engine();
  const std::string& file = source.source;
  const auto drafts = apply_draft(draft, engine.bundle(), source.open, source.threads, g);
  share_draft_workers(drafts, engine.executor());
  const auto& m = engine.bundle().model();
  std::optional<runtime::TextSide> text;
  if (as_text)
    text = runtime::load_text_side(engine.bundle(), file);
  if (!ignore_eos) {
    if (!eos_text.empty())
      g.stop.eos_ids = parse_id_list<std::int32_t>(eos_text, "--eos-ids");
    else if (text) // the tokenizer's eos ids and the chat formats' end-of-turn tokens
      g.stop.eos_ids = text->stop_ids;
    else
      for (auto e : m.eos_token_ids)
        g.stop.eos_ids.push_back(static_cast<std::int32_t>(e));
  }
  // Sampling options left at their defaults take generation_config.json's (text mode, as chat).
  if (text)
    (void)apply_generation_defaults(vm, text->tokenizer.config().generation_defaults, g);
  g.sampling.validate();
  g.stop.validate();
  if (vm.count("chat"))
    check(text->chat_template.has_value(), ErrorKind::unsupported, file,
          "no chat template: ", text->tokenizer.config().no_chat_template_reason(),
          "; use --prompt for raw text");
  runtime::GenerateResult r;
  if (text) {
    runtime::PromptCache cache(engine.session());
    runtime::Conversation conv(cache, text->tokenizer,
                               text->chat_template ? &*text->chat_template : nullptr, system);
    auto sink = [](std::string_view piece) { std::cout << piece << std::flush; };
    r = (vm.count("chat") ? conv.say(chat_message, g, sink) : conv.complete(raw_prompt, g, sink))
            .generated.result;
    std::cout << "\n";
  } else {
    r = engine.session().generate(prompt, g);
    for (std::size_t i = 0; i < r.tokens.size(); ++i)
      std::cout << (i ? "," : "") << r.tokens[i];
    std::cout << "\n";
  }
  // The banner comes with the results, so that a refusal is the only line on stderr.
  if (!quiet)
    std::cerr << "ran " << file << " (" << m.family << " '" << m.source << "', mode " << m.mode
              << ", seq_length " << m.params.seq_length << ")\n"
              << checked << (checked.empty() ? "" : "\n");
  if (!quiet) {
    const double decoded = static_cast<double>(r.tokens.size()) - 1;
    std::cerr << std::fixed << std::setprecision(1) << "stopped: " << runtime::to_string(r.reason)
              << " after " << r.tokens.size() << " tokens\n"
              << "time to first token " << r.prefill_seconds * 1e3 << " ms; prefill "
              << static_cast<double>(r.prompt_tokens) / r.prefill_seconds << " tokens/s ("
              << r.prompt_tokens << " tokens); decode "
              << (decoded > 0 && r.decode_seconds > 0 ? decoded / r.decode_seconds : 0.0)
              << " tokens/s\n";
    if (const auto spec = describe_speculation(g, r); !spec.empty())
      std::cerr << spec << "\n";
    if (const auto line = ce.describe(); !line.empty())
      std::cerr << line << "\n";
  }
  return ce.peak_within_budget(std::cerr) ? kOk : kCheckFailed;
}

} // namespace tpullm::cli
