#pragma once
// The sampling and stopping options of the commands that generate (run, chat), the defaults a
// model's generation_config.json gives to those the user leaves out, and the JSON-valued
// template options of the text commands.
#include <string>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "tpullm/runtime/session.hpp"

namespace tpullm::cli {

/// -n/--max-new-tokens, --temperature, --top-k, --top-p, --repetition-penalty, --seed and
/// --stop (repeatable) writing into `g` (greedy, 64 new tokens, no stop string by default).
boost::program_options::options_description sampling_options(runtime::GenerateOptions& g);

/// --json-schema FILE, --grammar FILE and --json (one of them): the grammar the answer must
/// stay in (GenerateOptions::grammar). Files are read (at most 1 MiB) and parsed when the
/// options are notified; a bad file is Error(invalid_input) / Error(unsupported) naming it.
boost::program_options::options_description constraint_options(runtime::GenerateOptions& g);

/// --draft none|prompt-lookup[:N]: speculative decoding with drafts from the context, at most N
/// (default 6) draft tokens per verify call (GenerateOptions::speculation; the answer is the
/// same either way).
boost::program_options::options_description speculation_options(runtime::GenerateOptions& g);

/// The speculation figures of an answer ("" when nothing was drafted), for the stats lines.
std::string describe_speculation(const runtime::GenerateResult& r);

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
