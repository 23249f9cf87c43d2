#pragma once
/// Embeddings of a decoder LM: a prompt prefilled from position 0 (a fresh cache, as many
/// segments as it needs), the final hidden states put through the `final_norm` stage (the model's
/// final RMSNorm, lm_head's first op; stage_builder.hpp) instead of lm_head, pooled (the last
/// token's row, or the mean of every row) and L2-normalized. Last-token pooling is the default
/// for decoder LMs (as Qwen3-Embedding pools); mean pooling averages the normed rows, as
/// sentence-transformers' mean pooling averages the last hidden state.

#include <cstdint>
#include <string_view>
#include <vector>

#include "tpullm/runtime/session.hpp"

namespace tpullm::runtime {

/// How the rows of a prompt become one vector.
enum class Pooling {
  last, ///< the last token's normed hidden state
  mean, ///< the mean of every token's normed hidden state
};

/// "last" or "mean".
std::string_view to_string(Pooling p) noexcept;
/// Pooling of "last" or "mean"; throws Error(invalid_input) naming `where` for anything else.
Pooling parse_pooling(std::string_view s, std::string_view where);

/// What embed() does.
struct EmbedOptions {
  Pooling pooling = Pooling::last; ///< see Pooling
  bool normalize = true;           ///< divide by the L2 norm (an all-zero vector stays zero)
};

/// The embedding [hidden] of `tokens`: the session is reset and the tokens prefilled from
/// position 0 (its cache then holds them), final_norm runs on the rows the pooling needs, and
/// they are pooled (in double) and normalized. Throws Error(unsupported) when the session's
/// executor has no final_norm stage (a bundle compiled before it existed: recompile it), and
/// prefill()'s refusals (empty prompt, too long, ids outside the vocabulary).
std::vector<float> embed(Session& session, const std::vector<std::int32_t>& tokens,
                         const EmbedOptions& options = {});

} // namespace tpullm::runtime
