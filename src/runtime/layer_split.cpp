// Out-of-line definitions of tpullm/runtime/layer_split.hpp (compiled once into tpullm_core).
#include "tpullm/runtime/layer_split.hpp"

#include <algorithm>
#include <charconv>
#include <numeric>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/frontend/tensor_parallel.hpp"
#include "tpullm/runtime/kv_region.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::runtime {

std::int64_t weight_layer(std::string_view name) {
  if (name.starts_with("model."))
    name.remove_prefix(6);
  constexpr std::string_view prefix = "layers.";
  if (!name.starts_with(prefix))
    return -1;
  name.remove_prefix(prefix.size());
  std::int64_t n = -1;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), n);
  if (ec != std::errc{} || end == name.data() + name.size() || *end != '.')
    return -1;
  return n;
}

bool rank_holds(std::string_view name, LayerRange range, bool shared, std::int64_t tensor_rank) {
  const auto r = frontend::tp_weight_rank(name);      // -1: a weight every rank reads whole
  if (tensor_rank >= 0 && r >= 0 && r != tensor_rank) // another rank's shard
    return false;
  const auto l = weight_layer(name);
  if (l < 0) // a shard of the lm_head is its rank's; the rest outside the layers rank 0's
    return (tensor_rank >= 0 && r >= 0) || shared;
  return l >= range.begin && l < range.end;
}

namespace {

std::int64_t stored_bytes(const ir::Weight& w) {
  std::int64_t n = 0;
  for (const auto& p : w.parts)
    n += static_cast<std::int64_t>(p.bytes.size());
  return n;
}

/// The ranges of the greedy cut under bound `m` (each range as long as it may be while leaving a
/// layer for every later rank), or empty when `m` cannot be met.
std::vector<LayerRange> cut(std::span<const std::int64_t> bytes, std::int64_t ranks,
                            std::int64_t first_extra, std::int64_t m) {
  const auto L = static_cast<std::int64_t>(bytes.size());
  std::vector<LayerRange> out;
  std::int64_t i = 0;
  for (std::int64_t r = 0; r < ranks; ++r) {
    std::int64_t sum = r == 0 ? first_extra : 0;
    const std::int64_t last = L - (ranks - r - 1); // layers [i, last) may go to rank r
    std::int64_t j = i;
    while (j < last && (j == i || r == ranks - 1 || sum + bytes[static_cast<std::size_t>(j)] <= m))
      sum += bytes[static_cast<std::size_t>(j++)];
    if (sum > m)
      return {};
    out.push_back({i, j});
    i = j;
  }
  return i == L ? out : std::vector<LayerRange>{};
}

} // namespace

RankMemory rank_memory(const bundle::Bundle& b, LayerRange range, bool shared, std::int64_t cores,
                       std::int64_t slots, std::int64_t tensor_rank) {
  RankMemory m;
  const std::int64_t conversations = slots > 0 ? slots : b.kv().slots;
  for (const auto& w : b.weights())
    if (rank_holds(w.name, range, shared, tensor_rank))
      m.weights += stored_bytes(w);
  // Its layers' caches in the resident set, a sliding-window layer's as its ring
  // (runtime/kv_region.hpp, KvRings::resident_bytes).
  const auto rings = kv_rings_of(b.programs(), b.kv());
  for (std::int64_t l = range.begin; l < range.end; ++l)
    m.kv += 2 * rings.resident(l, b.kv().capacity) * b.kv().row_bytes * conversations;
  m.activations = b.max_arena() + std::max(b.target().local_memory, b.max_local()) * cores;
  return m;
}

std::vector<std::int64_t> layer_weight_bytes(const bundle::Bundle& b) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(b.model().layers), 0);
  for (const auto& w : b.weights()) {
    const auto l = weight_layer(w.name);
    if (l >= 0 && l < static_cast<std::int64_t>(out.size()))
      out[static_cast<std::size_t>(l)] += stored_bytes(w);
  }
  return out;
}

std::int64_t shared_weight_bytes(const bundle::Bundle& b) {
  std::int64_t n = 0;
  for (const auto& w : b.weights())
    if (weight_layer(w.name) < 0)
      n += stored_bytes(w);
  return n;
}

std::vector<LayerRange> split_layers(std::span<const std::int64_t> bytes, std::int64_t ranks,
                                     std::int64_t first_extra) {
  const auto L = static_cast<std::int64_t>(bytes.size());
  check(ranks >= 1 && ranks <= L, ErrorKind::invalid_input, "pipeline", ranks,
        " ranks cannot each take a layer of ", L);
  std::vector<std::int64_t> w(bytes.begin(), bytes.end());
  if (std::all_of(w.begin(), w.end(), [](std::int64_t x) { return x == 0; })) {
    std::fill(w.begin(), w.end(), 1); // no sizes known: balance layer counts
    first_extra = 0;
  }
  // The smallest bound some cut meets is one of the ranges' sums: search them in order.
  std::vector<std::int64_t> bounds;
  for (std::int64_t i = 0; i < L; ++i) {
    std::int64_t s = i == 0 ? first_extra : 0;
    for (std::int64_t j = i; j < L; ++j)
      bounds.push_back(s += w[static_cast<std::size_t>(j)]);
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  std::size_t lo = 0, hi = bounds.size() - 1; // the largest bound (everything) always fits
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (cut(w, ranks, first_extra, bounds[mid]).empty())
      lo = mid + 1;
    else
      hi = mid;
  }
  auto out = cut(w, ranks, first_extra, bounds[lo]);
  check(!out.empty(), ErrorKind::internal, "pipeline", "no layer split found");
  return out;
}

std::vector<LayerRange> parse_layer_split(std::string_view text, std::int64_t layers,
                                          std::int64_t ranks) {
  std::vector<LayerRange> out;
  std::int64_t at = 0;
  while (true) {
    const auto comma = text.find(',');
    const auto piece = text.substr(0, comma);
    std::int64_t n = 0;
    const auto [end, ec] = std::from_chars(piece.data(), piece.data() + piece.size(), n);
    check(!piece.empty() && ec == std::errc{} && end == piece.data() + piece.size() && n > 0,
          ErrorKind::invalid_input, "--layer-split",
          "takes positive layer counts, comma-separated (one per rank); got '", piece, "'");
    check(n <= layers - at, ErrorKind::invalid_input, "--layer-split",
          "counts more than the model's ", layers, " layers"); // before the sum can overflow
    out.push_back({at, at + n});
    at += n;
    if (comma == std::string_view::npos)
      break;
    text.remove_prefix(comma + 1);
  }
  check(static_cast<std::int64_t>(out.size()) == ranks, ErrorKind::invalid_input, "--layer-split",
        "gives ", out.size(), " counts for ", ranks, " ranks");
  check(at == layers, ErrorKind::invalid_input, "--layer-split", "counts ", at,
        " layers; the model has ", layers);
  return out;
}

} // namespace tpullm::runtime
