#pragma once
// The sampling and stopping options of the commands that generate (run, chat), the defaults a
// model's generation_config.json gives to those the user leaves out, and the JSON-valued
// template options of the text commands.
#include <memory>
#include <string>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "tpullm/bundle/bundle.hpp"
#include "tpullm/runtime/executor.hpp"
#include "tpullm/runtime/session.hpp"

namespace tpullm::cli {

/// -n/--max-new-tokens, --temperature, --top-k, --top-p, --repetition-penalty, --seed and
/// --stop (repeatable) writing into `g` (greedy, 64 new tokens, no stop string by default).
boost::program_options::options_description sampling_options(runtime::GenerateOptions& g);

/// --json-schema FILE, --grammar FILE and --json (one of them): the grammar the answer must
/// stay in (GenerateOptions::grammar). Files are read (at most 1 MiB) and parsed when the
/// options are notified; a bad file is Error(invalid_input) / Error(unsupported) naming it.
boost::program_options::options_description constraint_options(runtime::GenerateOptions& g);

/// --draft and --draft-max as given (speculative decoding; docs/cli.md).
struct DraftArgs {
  std::string source = "none"; ///< none, prompt-lookup, self, or a draft bundle file
  int max = 3;                 ///< draft tokens per verify call at most
};

/// --draft none|prompt-lookup|DRAFT.bundle and --draft-max N into `d`.
boost::program_options::options_description speculation_options(DraftArgs& d);

/// What a draft bundle needs while answers are generated: its session and the draft model.
struct DraftEngine;
/// Deleter of DraftEngine (complete in sampling_options.cpp).
struct DraftEngineDeleter {
  void operator()(DraftEngine* e) const;
};
using DraftEngineHolder = std::unique_ptr<DraftEngine, DraftEngineDeleter>;

/// Runs a draft model's kernels on `target`'s worker threads (the model it drafts for, which
/// never runs at the same time): two pools of workers on the same cores would each find the
/// other's spinning workers in their way. Nothing for none, nor for a draft run on another
/// number of threads.
void share_draft_workers(const DraftEngineHolder& e, runtime::Executor& target);

/// Makes a draft model forget its conversation, so that the next answer starts it afresh (a
/// bench repeat); nothing for none.
void reset_draft(const DraftEngineHolder& e);

/// What a draft bundle adds to a process's memory: its file, KV cache and activation arena (0
/// for none).
std::int64_t draft_memory_bytes(const DraftEngineHolder& e);

/// Sets `g.speculation` from `d` for answers of the `target` bundle (GenerateOptions::speculation;
/// the answer is the same either way). A draft bundle is opened on `threads` cores and must have
/// the target's vocabulary (and tokenizer, when both have one) and prefill_kv (opened with
/// `open`, as the target was); the returned
/// holder keeps it alive (null for none / prompt-lookup). Error(invalid_input) for a bad value.
DraftEngineHolder apply_draft(const DraftArgs& d, const bundle::Bundle& target,
                              const BundleOpenOptions& open, std::int64_t threads,
                              runtime::GenerateOptions& g);

/// The speculation figures of an answer generated with `g` ("" when `g` does not speculate;
/// "0 verify calls" when no draft was found), for the stats lines.
std::string describe_speculation(const runtime::GenerateOptions& g,
                                 const runtime::GenerateResult& r);

/// Takes generation_config.json's sampling fields (`defaults`: do_sample, temperature, top_k,
/// top_p, repetition_penalty) for each option the command line did not give; do_sample false
/// or absent keeps greedy. Returns a one-line description of the result ("greedy" or
/// "temperature 0.7, top-p 0.8, ...", with "(generation_config.json)" when a default was used).
std::string apply_generation_defaults(const boost::program_options::variables_map& vm,
                                      const nlohmann::json& defaults, runtime::GenerateOptions& g);

/// The JSON object given to `option` (e.g. --template-kwargs), key order kept. Throws
/// Error(invalid_input) naming the option when it is not JSON or not an object.
nlohmann::ordered_json parse_json_object(const std::string& text, const char* option);

} // namespace tpullm::cli
