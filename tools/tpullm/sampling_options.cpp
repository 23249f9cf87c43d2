// Sampling options of run and chat (sampling_options.hpp).
#include "sampling_options.hpp"

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "command.hpp"
#include "step_bytes.hpp"
#include "tpullm/grammar/grammar.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/draft_model.hpp"
#include "tpullm/support/input_file.hpp"
#include "tpullm/support/json.hpp"

namespace tpullm::cli {

po::options_description sampling_options(runtime::GenerateOptions& g) {
  po::options_description o("sampling");
  g.stop.max_new_tokens = 64;
  o.add_options()("max-new-tokens,n", po::value(&g.stop.max_new_tokens)->default_value(64),
                  "most tokens to generate per answer")(
      "temperature", po::value(&g.sampling.temperature)->default_value(0.0f, "0"),
      "0: greedy; > 0: sample from softmax(logits / T)")(
      "top-k", po::value(&g.sampling.top_k)->default_value(0), "keep the k most likely (0: off)")(
      "top-p", po::value(&g.sampling.top_p)->default_value(1.0f, "1"),
      "keep the smallest set with probability mass >= p (1: off)")(
      "repetition-penalty", po::value(&g.sampling.repetition_penalty)->default_value(1.0f, "1"),
      "penalize tokens already in the conversation (HF semantics; 1: off)")(
      "seed", po::value<std::string>()->default_value("0")->notifier([&g](const std::string& v) {
        const auto seeds = parse_id_list<std::uint64_t>(v, "--seed");
        check(seeds.size() == 1, ErrorKind::invalid_input, "--seed",
              "expects one integer in [0, 2^64)");
        g.sampling.seed = seeds[0];
      }),
      "random seed of the sampler, in [0, 2^64)")(
      "stop", po::value(&g.stop.stop_strings)->composing(),
      "end the answer before this text (repeatable; the text is not printed, and text that may "
      "begin it is held back until decided)");
  return o;
}

namespace {

/// Most bytes of a --json-schema / --grammar file.
constexpr std::size_t kMaxGrammarFileBytes = std::size_t{1} << 20;

} // namespace

po::options_description constraint_options(runtime::GenerateOptions& g) {
  po::options_description o("constrained output (docs/grammar.md)");
  o.add_options()("json-schema", po::value<std::string>()->notifier([&g](const std::string& file) {
    check(!g.grammar, ErrorKind::invalid_input, "--json-schema",
          "takes no --grammar or --json beside it");
    const std::string text = read_regular_file(file, kMaxGrammarFileBytes);
    g.grammar = grammar::grammar_from_json_schema(
        parse_json(text, file, "is not JSON (--json-schema expects a JSON Schema)"));
  }),
                  "the answer is JSON valid against the JSON Schema in this file (the subset of "
                  "docs/grammar.md; a schema outside it is refused by name)")(
      "grammar", po::value<std::string>()->notifier([&g](const std::string& file) {
        check(!g.grammar, ErrorKind::invalid_input, "--grammar",
              "takes no --json-schema or --json beside it");
        g.grammar = grammar::parse_grammar(read_regular_file(file, kMaxGrammarFileBytes));
      }),
      "the answer is in the language of the grammar in this file (docs/grammar.md)")(
      "json", po::bool_switch()->notifier([&g](bool on) {
        if (!on)
          return;
        check(!g.grammar, ErrorKind::invalid_input, "--json",
              "takes no --json-schema or --grammar beside it");
        g.grammar = grammar::json_object_grammar();
      }),
      "the answer is one JSON object (OpenAI's json_object response format)");
  return o;
}

po::options_description speculation_options(DraftArgs& d) {
  po::options_description o("speculative decoding (docs/cli.md)");
  o.add_options()("draft", po::value(&d.source)->default_value(d.source),
                  "none | prompt-lookup | self | DRAFT.bundle: draft tokens from the context "
                  "(what followed the last 2-3 tokens earlier), from the draft model compiled "
                  "into the bundle (compile --draft-mode) or from a smaller model with the same "
                  "vocabulary, checked in one prefill_kv call of at most 16 tokens; the answer is "
                  "the same as without (bit for bit with --act-quant dynamic; to float rounding "
                  "with float linears) (fastest with --prefill-lengths and --decode-batches "
                  "holding --draft-max + 1, e.g. 4 and 1,4; serve drafts only for a slot "
                  "generating alone, since a batched round serves every slot in one read)")(
      "draft-max", po::value(&d.max)->default_value(d.max),
      "draft tokens per verify call at most, 1 to 15 (the length adapts below it, and "
      "stays below the longest prefill length of at most 16)");
  return o;
}

struct DraftEngine {
  runtime::BundleSession session;
  runtime::DraftModel model;
  explicit DraftEngine(std::shared_ptr<const bundle::Bundle> b, std::int64_t threads)
      : session(std::move(b), threads), model(session.session()) {}
};

void DraftEngineDeleter::operator()(DraftEngine* e) const {
  delete e;
}

namespace {

/// A draft step's weight bytes over the model's (the decode steps' cost, both read-bound),
/// through each one's longest decode variant.
double draft_cost(const bundle::Bundle& draft, const bundle::Bundle& model) {
  const auto bytes = [](const bundle::Bundle& b) {
    return static_cast<double>(decode_weight_bytes(b, b.model().params.decode_lengths().front()));
  };
  return std::min(100.0, bytes(draft) / std::max(1.0, bytes(model)));
}

/// Makes `e`'s draft model the draft source of `g`, priced against `target`.
DraftEngineHolder wire_draft(DraftEngineHolder e, const bundle::Bundle& target,
                             runtime::GenerateOptions& g) {
  g.speculation.draft = e->model.source();
  g.speculation.prepare = e->model.preparer();
  g.speculation.draft_cost = draft_cost(e->session.bundle(), target);
  return e;
}

} // namespace

void share_draft_workers(const DraftEngineHolder& e, runtime::Executor& target) {
  if (e && e->session.executor().threads() == target.threads())
    e->session.executor().share_workers(target);
}

void reset_draft(const DraftEngineHolder& e) {
  if (e)
    e->model.reset();
}

std::int64_t draft_memory_bytes(const DraftEngineHolder& e) {
  if (!e)
    return 0;
  const auto& b = e->session.bundle();
  return b.file_bytes() + e->session.executor().kv_resident_bytes() +
         e->session.executor().arena_bytes();
}

DraftEngineHolder apply_draft(const DraftArgs& d, const bundle::Bundle& target,
                              const BundleOpenOptions& open, std::int64_t threads,
                              runtime::GenerateOptions& g) {
  check(d.max >= 1 && d.max <= runtime::SpeculationOptions::kMaxDraft, ErrorKind::invalid_input,
        "--draft-max", "must be in [1, ", runtime::SpeculationOptions::kMaxDraft, "], got ", d.max);
  g.speculation.draft_max = d.source == "none" ? 0 : d.max;
  // Refused here, before anything runs or is measured, not at the first verify call: a bundle
  // without prefill_kv (--no-history) or without a prefill length of at most 16.
  if (d.source != "none")
    (void)runtime::verify_draft_max(target.model().params, d.max, "--draft");
  if (d.source == "none" || d.source == "prompt-lookup")
    return nullptr;
  std::shared_ptr<const bundle::Bundle> b;
  if (d.source == "self") {
    // The draft compiled into the bundle (compile --draft-mode); decoded and checked with it.
    check(target.draft() != nullptr, ErrorKind::invalid_input, "--draft",
          "self: this bundle has no draft model (compile it with --draft-mode w4a16, or name a "
          "draft bundle file)");
    return wire_draft(DraftEngineHolder(new DraftEngine(target.draft(), threads)), target, g);
  }
  check(std::filesystem::is_regular_file(d.source), ErrorKind::invalid_input, "--draft", "'",
        d.source, "' is neither none, prompt-lookup, self nor an existing draft bundle file");
  b = open_bundle(d.source, open, threads);
  const auto& dm = b->model();
  const auto& tm = target.model();
  check(dm.vocab == tm.vocab, ErrorKind::invalid_input, "--draft", d.source,
        ": its vocabulary has ", dm.vocab, " ids, the model's ", tm.vocab,
        " (a draft model needs the same tokenizer)");
  check(dm.text.tokenizer_json.empty() || tm.text.tokenizer_json.empty() ||
            dm.text.tokenizer_json == tm.text.tokenizer_json,
        ErrorKind::invalid_input, "--draft", d.source,
        ": its tokenizer differs from the model's (a draft model needs the same tokenizer)");
  check(dm.params.with_history, ErrorKind::unsupported, "--draft", d.source,
        ": compiled with --no-history; a draft model follows the conversation through prefill_kv");
  return wire_draft(DraftEngineHolder(new DraftEngine(std::move(b), threads)), target, g);
}

std::string describe_speculation(const runtime::GenerateOptions& g,
                                 const runtime::GenerateResult& r) {
  const auto& s = r.speculation;
  if (g.speculation.draft_max == 0)
    return {};
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << "speculation: " << s.verify_calls << " verify calls, "
    << s.drafted << " tokens drafted, " << s.accepted << " accepted (" << 100 * s.acceptance()
    << "%)";
  if (r.draft_prefill_seconds > 0)
    o << ", the draft model's prompt catch-up " << 1e3 * r.draft_prefill_seconds << " ms";
  return o.str();
}

std::string apply_generation_defaults(const po::variables_map& vm, const nlohmann::json& d,
                                      runtime::GenerateOptions& g) {
  bool used = false;
  const bool sample = d.is_object() && d.value("do_sample", false);
  auto take = [&](const char* opt, const char* key, auto& field) {
    if (!sample || !vm[opt].defaulted() || !d.contains(key) || !d[key].is_number())
      return;
    field = d[key].get<std::remove_reference_t<decltype(field)>>();
    used = true;
  };
  take("temperature", "temperature", g.sampling.temperature);
  take("top-k", "top_k", g.sampling.top_k);
  take("top-p", "top_p", g.sampling.top_p);
  take("repetition-penalty", "repetition_penalty", g.sampling.repetition_penalty);
  g.sampling.validate();
  std::ostringstream o;
  if (g.sampling.greedy())
    o << "greedy";
  else
    o << "temperature " << g.sampling.temperature << ", top-k " << g.sampling.top_k << ", top-p "
      << g.sampling.top_p << ", seed " << g.sampling.seed;
  if (g.sampling.repetition_penalty != 1.0f)
    o << ", repetition penalty " << g.sampling.repetition_penalty;
  if (used)
    o << " (defaults from generation_config.json)";
  return o.str();
}

nlohmann::ordered_json parse_json_object(const std::string& text, const char* option) {
  nlohmann::ordered_json j = parse_ordered_json(text, option, "is not JSON");
  check(j.is_object(), ErrorKind::invalid_input, option, "must be a JSON object");
  return j;
}

} // namespace tpullm::cli
