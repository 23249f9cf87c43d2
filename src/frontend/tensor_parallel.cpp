// Out-of-line definitions of tpullm/frontend/tensor_parallel.hpp (compiled once into tpullm_core).
#include "tpullm/frontend/tensor_parallel.hpp"

#include <cstring>
#include <memory>
#include <set>
#include <utility>

#include "tpullm/frontend/stage_builder.hpp"

namespace tpullm::frontend {

namespace {

/// The sliced slots of a layer with their Top names (biases included; absent ones skipped by
/// the callers).
std::vector<std::pair<std::string, const WeightRef*>> tp_sliced_slots(const LayerWeights& w) {
  return {{"q", &w.q},           {"k", &w.k},           {"v", &w.v},
          {"o", &w.o},           {"q_bias", &w.q_bias}, {"k_bias", &w.k_bias},
          {"v_bias", &w.v_bias}, {"o_bias", &w.o_bias}, {"gate", &w.gate},
          {"up", &w.up},         {"down", &w.down}};
}

WeightRef tp_plain_ref(TensorView t, WeightLayout layout) {
  WeightRef r;
  r.storage = PlainWeight{std::move(t), layout};
  return r;
}

/// Rows [r0, r0 + n) of a [rows, ...] tensor (a linear [out, in], a table [vocab, hidden] or a
/// bias [out]; plain or GGUF blocks, stored row by row either way): a zero-copy view sharing the
/// tensor's keepalive. An absent slot stays absent.
WeightRef tp_row_slice(const WeightRef& w, std::int64_t r0, std::int64_t n) {
  if (!w.present())
    return w;
  if (w.is_ggml()) {
    GgmlWeight g = w.ggml();
    check(r0 >= 0 && n >= 1 && r0 + n <= g.rows, ErrorKind::internal, g.where(), "rows [", r0, ", ",
          r0 + n, ") outside ", g.rows);
    const std::size_t row_bytes = g.bytes.size() / static_cast<std::size_t>(g.rows);
    g.bytes = g.bytes.subspan(static_cast<std::size_t>(r0) * row_bytes,
                              static_cast<std::size_t>(n) * row_bytes);
    g.rows = n;
    WeightRef r;
    r.storage = std::move(g);
    return r;
  }
  const PlainWeight& p = w.plain();
  TensorView t = p.tensor;
  check(!t.shape.empty() && r0 >= 0 && n >= 1 && r0 + n <= t.shape[0], ErrorKind::internal,
        t.where(), "rows [", r0, ", ", r0 + n, ") outside ", shape_str(t.shape));
  const std::size_t row_bytes = t.bytes.size() / static_cast<std::size_t>(t.shape[0]);
  t.bytes = t.bytes.subspan(static_cast<std::size_t>(r0) * row_bytes,
                            static_cast<std::size_t>(n) * row_bytes);
  t.shape[0] = n;
  return tp_plain_ref(std::move(t), p.layout);
}

/// Copies bytes [c0, c0 + m) of each of `rows` rows of `row` bytes from `src`: the columns of a
/// slice, owned by the returned buffer.
std::shared_ptr<std::vector<std::byte>> copy_columns(std::span<const std::byte> src,
                                                     std::size_t rows, std::size_t row,
                                                     std::size_t c0, std::size_t m) {
  auto data = std::make_shared<std::vector<std::byte>>(rows * m);
  for (std::size_t i = 0; i < rows; ++i)
    std::memcpy(data->data() + i * m, src.data() + i * row + c0, m);
  return data;
}

/// Columns [c0, c0 + n) of a [rows, cols] linear (its in-features): a copy owned by the view's
/// keepalive, the stored bytes as they are (GGUF blocks: whole blocks, which
/// tensor_parallel_refusal has checked).
WeightRef tp_column_slice(const WeightRef& w, std::int64_t c0, std::int64_t n) {
  if (w.is_ggml()) {
    GgmlWeight g = w.ggml();
    const auto block = conversion::ggml_info(g.type);
    check(c0 >= 0 && n >= 1 && c0 + n <= g.cols && c0 % block.block_elems == 0 &&
              n % block.block_elems == 0,
          ErrorKind::internal, g.where(), "columns [", c0, ", ", c0 + n, ") are not whole ",
          block.name, " blocks of ", g.cols);
    const auto per = static_cast<std::size_t>(block.block_bytes);
    auto data = copy_columns(g.bytes, static_cast<std::size_t>(g.rows),
                             g.bytes.size() / static_cast<std::size_t>(g.rows),
                             static_cast<std::size_t>(c0 / block.block_elems) * per,
                             static_cast<std::size_t>(n / block.block_elems) * per);
    g.cols = n;
    g.bytes = std::span<const std::byte>(data->data(), data->size());
    g.keepalive = std::move(data);
    WeightRef r;
    r.storage = std::move(g);
    return r;
  }
  const PlainWeight& p = w.plain();
  const TensorView& t = p.tensor;
  check(t.shape.size() == 2 && c0 >= 0 && n >= 1 && c0 + n <= t.shape[1], ErrorKind::internal,
        t.where(), "columns [", c0, ", ", c0 + n, ") outside ", shape_str(t.shape));
  const std::size_t es = dtype_size(t.dtype);
  auto data = copy_columns(t.bytes, static_cast<std::size_t>(t.shape[0]),
                           static_cast<std::size_t>(t.shape[1]) * es,
                           static_cast<std::size_t>(c0) * es, static_cast<std::size_t>(n) * es);
  TensorView out = t;
  out.shape = {t.shape[0], n};
  out.bytes = std::span<const std::byte>(data->data(), data->size());
  out.keepalive = std::move(data);
  return tp_plain_ref(std::move(out), p.layout);
}

/// Empty when linear `w` can be sliced into column shares of `share`: plain, or GGUF blocks the
/// shares' edges do not cut; else why not (`what` names it).
std::string column_refusal(const WeightRef& w, const std::string& what, std::int64_t share,
                           std::int64_t ranks) {
  if (!w.is_ggml())
    return {};
  const auto block = conversion::ggml_info(w.ggml().type);
  if (share % block.block_elems == 0)
    return {};
  return str_cat("tensor parallel cuts GGUF blocks only at their edges; ", what, " (", block.name,
                 ", ", block.block_elems, " values a block) would split its ", w.ggml().cols,
                 " columns over ", ranks, " ranks into shares of ", share);
}

} // namespace

std::string tp_split_refusal(std::int64_t heads, std::int64_t kv_heads, std::int64_t intermediate,
                             std::int64_t vocab, std::int64_t ranks) {
  if (vocab < ranks)
    return str_cat("tensor parallel splits the vocabulary; ", vocab, " tokens for ", ranks,
                   " ranks");
  if (heads % ranks != 0)
    return str_cat("tensor parallel splits attention heads evenly; ", heads,
                   " heads do not divide over ", ranks, " ranks");
  if (tp_kv_heads(kv_heads, ranks) == 0)
    return str_cat("tensor parallel splits key/value heads evenly or gives each rank one; ",
                   kv_heads, " kv heads neither divide over ", ranks, " ranks nor divide ", ranks);
  if (intermediate % ranks != 0)
    return str_cat("tensor parallel splits MLP columns evenly; intermediate ", intermediate,
                   " does not divide over ", ranks, " ranks");
  return {};
}

std::string tensor_parallel_refusal(const ModelDesc& d, std::int64_t ranks) {
  const auto& m = d.dims;
  if (ranks < 2 || ranks > kMaxTensorParallel)
    return str_cat("tensor parallel needs 2 to ", kMaxTensorParallel, " ranks, got ", ranks);
  for (std::size_t i = 0; i < d.layers.size(); ++i)
    if (d.layers[i].sparse())
      return str_cat("tensor parallel does not split mixture-of-experts layers; layer ", i,
                     " routes over ", d.layers[i].moe.experts.size(), " experts");
  for (std::size_t i = 0; i < d.layers.size(); ++i)
    for (const auto& [slot, ref] : tp_sliced_slots(d.layers[i]))
      if (ref->present() && std::holds_alternative<QuantizedWeight>(ref->storage))
        return str_cat("tensor parallel splits float checkpoints and GGUF files, not GPTQ / AWQ "
                       "packing; layers.",
                       i, ".", slot, " (", ref->name(), ") is packed");
  for (const WeightRef* head : {&d.lm_head, &d.embedding})
    if (head->present() && std::holds_alternative<QuantizedWeight>(head->storage))
      return str_cat("tensor parallel splits float checkpoints and GGUF files, not GPTQ / AWQ "
                     "packing; the ",
                     head == &d.lm_head ? "lm_head" : "embedding table", " (", head->name(),
                     ") is packed");
  if (std::string why = tp_split_refusal(m.heads, m.kv_heads, m.intermediate, m.vocab, ranks);
      !why.empty())
    return why;
  // GGUF blocks run along the in-features: o's and down's column shares must be whole blocks.
  for (std::size_t i = 0; i < d.layers.size(); ++i) {
    const std::string layer = str_cat("layers.", i, ".");
    for (const std::string& why :
         {column_refusal(d.layers[i].o, layer + "o", m.heads / ranks * m.head_dim, ranks),
          column_refusal(d.layers[i].down, layer + "down", m.intermediate / ranks, ranks)})
      if (!why.empty())
        return why;
  }
  return {};
}

ModelDesc tensor_shard(const ModelDesc& d, std::int64_t rank, std::int64_t ranks) {
  if (const std::string why = tensor_parallel_refusal(d, ranks); !why.empty())
    throw Error(ErrorKind::invalid_input, d.dir.string(), why);
  check(rank >= 0 && rank < ranks, ErrorKind::invalid_input, "tensor_shard", "rank ", rank,
        " outside [0, ", ranks, ")");
  const std::int64_t hq = d.dims.heads, kvh = d.dims.kv_heads, D = d.dims.head_dim,
                     I = d.dims.intermediate;
  const std::int64_t q_heads = hq / ranks, kv_heads = tp_kv_heads(kvh, ranks), inter = I / ranks;
  // The first kv head this rank keeps: its share of a split, or under replication the one head
  // its query heads [rank*q_heads, ...) read (query head j reads kv head j / (hq / kvh)).
  const std::int64_t kv0 = kvh % ranks == 0 ? rank * kv_heads : (rank * q_heads) / (hq / kvh);
  ModelDesc s = d;
  s.dims.heads = q_heads;
  s.dims.kv_heads = kv_heads;
  s.dims.intermediate = inter;
  for (LayerWeights& w : s.layers) {
    const std::int64_t q0 = rank * q_heads * D, qn = q_heads * D, k0 = kv0 * D, kn = kv_heads * D;
    w.q = tp_row_slice(w.q, q0, qn);
    w.q_bias = tp_row_slice(w.q_bias, q0, qn);
    for (WeightRef* r : {&w.k, &w.k_bias, &w.v, &w.v_bias})
      *r = tp_row_slice(*r, k0, kn);
    w.o = tp_column_slice(w.o, q0, qn);
    if (rank != 0)
      w.o_bias = WeightRef{};
    w.gate = tp_row_slice(w.gate, rank * inter, inter);
    w.up = tp_row_slice(w.up, rank * inter, inter);
    w.down = tp_column_slice(w.down, rank * inter, inter);
  }
  return s;
}

std::vector<std::int64_t> tp_vocab_rows(std::int64_t vocab, std::int64_t ranks) {
  check(ranks >= 1 && vocab >= ranks, ErrorKind::invalid_input, "tensor parallel", vocab,
        " tokens cannot split over ", ranks, " ranks");
  std::vector<std::int64_t> v;
  for (std::int64_t r = 0; r <= ranks; ++r)
    v.push_back(r * vocab / ranks);
  return v;
}

ir::Module build_tp_head(const ModelDesc& d, std::int64_t rank, std::int64_t ranks,
                         std::int64_t batch) {
  const auto v = tp_vocab_rows(d.dims.vocab, ranks);
  const std::int64_t v0 = v[static_cast<std::size_t>(rank)],
                     n = v[static_cast<std::size_t>(rank) + 1] - v0;
  // The model with this rank's rows of the head as its whole head: lm_head's one template.
  ModelDesc slice = d;
  WeightRef& head = d.tie_word_embeddings ? slice.embedding : slice.lm_head;
  head = tp_row_slice(head, v0, n);
  slice.dims.vocab = n;
  return build_lm_head(slice, false, StageNames::tp_head(rank, batch), batch,
                       tp_weight_suffix(rank));
}

std::vector<ir::Module> build_tensor_parallel_modules(const ModelDesc& d, const StageParams& params,
                                                      std::int64_t ranks) {
  if (const std::string why = tensor_parallel_refusal(d, ranks); !why.empty())
    throw Error(ErrorKind::invalid_input, d.dir.string(), why);
  params.validate(d.dims.max_position);
  const RopeWeights rope = rope_weights(d, params.seq_length); // one table for every rank
  std::set<std::int64_t> rows{1}; // the MLP halves' row counts, ascending
  for (std::int64_t len : params.prefill_lengths())
    rows.insert(len);
  for (std::int64_t batch : params.decode_batch_sizes())
    rows.insert(batch);
  std::vector<ir::Module> out;
  append_embedding_modules(out, d, params);
  for (std::int64_t r = 0; r < ranks; ++r) {
    const ModelDesc shard = tensor_shard(d, r, ranks);
    const std::string suffix = tp_weight_suffix(r);
    for (std::int64_t i = 0; i < d.dims.layers; ++i) {
      for (auto [shape, name] : block_variants(i, params)) {
        shape.part = BlockPart::attention;
        shape.weight_suffix = suffix;
        out.push_back(build_block(shard, shape, rope, StageNames::tp_attention(r, name)));
      }
      for (std::int64_t n : rows) {
        BlockShape shape{i, n, 0, 1, BlockPart::mlp, suffix};
        out.push_back(build_block(shard, shape, rope, StageNames::tp_mlp(r, i, n)));
      }
    }
  }
  append_head_modules(out, d, params);
  for (std::int64_t r = 0; r < ranks; ++r) {
    out.push_back(build_tp_head(d, r, ranks, 1));
    for (std::int64_t batch : params.decode_batch_sizes())
      out.push_back(build_tp_head(d, r, ranks, batch));
  }
  return out;
}

} // namespace tpullm::frontend
