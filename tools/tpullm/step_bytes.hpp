#pragma once
// What one decode step of a bundle reads, for `tpullm bench`'s bytes per token and for the cost
// of a draft model's step beside the model's (--draft).
#include <cstdint>
#include <map>

#include "tpullm/bundle/bundle.hpp"

namespace tpullm::cli {

/// Bytes of weights one decode step of `b` reads through decode variant S: every weight of the
/// decode functions of that variant and of lm_head, the embedding table counted as one row (a
/// tied table is also the lm_head's weight, read whole there: the gather's row is counted apart,
/// so it cannot hide that read); a routed MLP counts top_k of its experts. A tensor-parallel
/// bundle: rank 0's share (its halves of every layer, its slice of the lm_head and the
/// embedding's row).
std::int64_t decode_weight_bytes(const bundle::Bundle& b, std::int64_t S);

/// The sliding window of each layer whose stage functions have one (layer -> window in
/// positions), read from their FAttention ops; empty for full attention everywhere.
std::map<std::int64_t, std::int64_t> sliding_windows(const bundle::Bundle& b);

/// KV cache bytes one decode step over `history` positions reads: keys and values of every
/// layer, a windowed layer's only within its window (`windows`: sliding_windows(b)).
double decode_kv_bytes(const bundle::Bundle& b, const std::map<std::int64_t, std::int64_t>& windows,
                       std::int64_t history);

} // namespace tpullm::cli
