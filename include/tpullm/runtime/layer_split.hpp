#pragma once
/// How a pipeline-parallel run (runtime/layer_pipeline.hpp, docs/distributed.md) deals a model's
/// decoder layers to its ranks: each rank a contiguous range, in rank order, balanced by the bytes
/// of their weights or as the user gives them (`--layer-split 12,12`).

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace tpullm::bundle {
class Bundle;
}

namespace tpullm::runtime {

/// Layers [begin, end) of one rank.
struct LayerRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; } ///< layers in the range
  friend bool operator==(const LayerRange&, const LayerRange&) = default;
};

/// The decoder layer weight `name` belongs to ("layers.N.*", as the stage modules name a layer's
/// weights, or "model.layers.N.*" as checkpoints do), or -1 (embedding, final norm, lm_head).
std::int64_t weight_layer(std::string_view name);

/// Whether a rank holds weight `name`: a layer weight of a layer in `range` (of its own shard,
/// when `tensor_rank` >= 0 and the weight is a shard), its own shard of the lm_head, or another
/// weight outside the layers when `shared` (rank 0, or a single process).
bool rank_holds(std::string_view name, LayerRange range, bool shared,
                std::int64_t tensor_rank = -1);

/// What one rank of a run holds in memory besides its process (code, libraries), in bytes.
struct RankMemory {
  std::int64_t weights = 0;     ///< its layers' weights (and the shared ones on rank 0)
  std::int64_t kv = 0;          ///< the KV cache of its layers (every conversation's)
  std::int64_t activations = 0; ///< activation arena and every core's local scratch
  std::int64_t total() const { return weights + kv + activations; }
};

/// RankMemory of a rank of `b` running `range` on `cores` threads with the KV caches of `slots`
/// conversations (0: the bundle's KV slots); `shared`: it also holds the weights outside the
/// layers (rank 0, or a single process with every layer); `tensor_rank`: its shard of a
/// tensor-parallel bundle (-1: every weight of its layers).
RankMemory rank_memory(const bundle::Bundle& b, LayerRange range, bool shared, std::int64_t cores,
                       std::int64_t slots = 0, std::int64_t tensor_rank = -1);

/// Bytes of the weights of each decoder layer of `b` [layers]: every weight whose name starts with
/// "layers.N." (the stage modules' names) or "model.layers.N." counts for layer N (all its
/// stored parts). Layers that name no weight count 0.
std::vector<std::int64_t> layer_weight_bytes(const bundle::Bundle& b);

/// Bytes of the weights of `b` outside every decoder layer (embedding, final norm, lm_head): what
/// rank 0 holds besides its layers.
std::int64_t shared_weight_bytes(const bundle::Bundle& b);

/// Contiguous ranges of `bytes.size()` layers for `ranks` ranks, every rank at least one layer,
/// cut so that the largest rank's bytes (rank 0's with `first_extra` added) is as small as it can
/// be; among such cuts, each range ends as late as it can, rank 0's first. All bytes zero:
/// layer counts as equal as they go. Throws Error(invalid_input) unless 1 <= ranks <= layers.
std::vector<LayerRange> split_layers(std::span<const std::int64_t> bytes, std::int64_t ranks,
                                     std::int64_t first_extra = 0);

/// `--layer-split A,B,...`: the layer count of each rank, in rank order; they must be `ranks`
/// positive counts summing to `layers`. Throws Error(invalid_input) naming the option otherwise.
std::vector<LayerRange> parse_layer_split(std::string_view text, std::int64_t layers,
                                          std::int64_t ranks);

} // namespace tpullm::runtime
