#pragma once
// What one decode step of a bundle reads, for `tpullm bench`'s bytes per token and for the cost
// of a draft model's step beside the model's (--draft).
#include <cstdint>

#include "tpullm/bundle/bundle.hpp"

namespace tpullm::cli {

/// Bytes of weights one decode step of `b` reads through decode variant S: every weight of the
/// decode functions of that variant and of lm_head, the embedding table counted as one row (a
/// tied table is also the lm_head's weight, read whole there: the gather's row is counted apart,
/// so it cannot hide that read); a routed MLP counts top_k of its experts.
std::int64_t decode_weight_bytes(const bundle::Bundle& b, std::int64_t S);

} // namespace tpullm::cli
