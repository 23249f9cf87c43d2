#pragma once
// The loaded pipeline behind text::Tokenizer.
#include <mutex>
#include <string>

#include "added_tokens.hpp"
#include "bpe.hpp"
#include "decoder.hpp"
#include "normalizer.hpp"
#include "post_processor.hpp"
#include "pre_tokenizer.hpp"
#include "tpullm/text/tokenizer.hpp"

namespace tpullm::text {

/// Every stage of one tokenizer.json, plus the configs and the raw texts.
struct Tokenizer::Impl {
  detail::Normalizer normalizer;
  detail::PreTokenizer pre_tokenizer;
  std::unique_ptr<detail::BpeModel> model;
  detail::PostProcessor post_processor;
  detail::Decoder decoder;
  std::unique_ptr<detail::AddedVocab> added;
  std::int64_t vocab_size = 0;
  TokenizerConfig config;
  std::string tokenizer_json, tokenizer_config_json, generation_config_json;
  /// Tokenizer::token_table, built on first use.
  mutable std::once_flag token_table_once;
  mutable std::shared_ptr<const TokenTable> token_table;
};

namespace detail {
/// Parses tokenizer_config.json and generation_config.json (either may be empty) into a config,
/// resolving token ids through `tok`.
TokenizerConfig parse_config(std::string_view tokenizer_config, std::string_view generation_config,
                             const Tokenizer& tok);
} // namespace detail

} // namespace tpullm::text
