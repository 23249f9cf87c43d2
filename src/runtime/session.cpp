// Out-of-line definitions of tpullm/runtime/session.hpp (compiled once into tpullm_core).
#include "tpullm/runtime/session.hpp"

#include <algorithm>

namespace tpullm::runtime {

Session::Session(Stages& stages, SessionDims dims, frontend::StageParams params)
    : stages_(stages), dims_(dims), params_(std::move(params)) {
  const std::size_t L = static_cast<std::size_t>(params_.max_input_length);
  hidden_[0].resize(L * static_cast<std::size_t>(dims_.hidden));
  hidden_[1].resize(hidden_[0].size());
  ids_.resize(L);
  pos_.resize(L);
  if (!stages_.owns_kv_cache()) {
    const auto n = static_cast<std::size_t>(params_.seq_length * row());
    k_cache_.assign(static_cast<std::size_t>(dims_.layers), std::vector<float>(n, 0.0f));
    v_cache_ = k_cache_;
  }
  auto table = [&](std::vector<std::int64_t> lengths) {
    Handles h;
    h.lengths = std::move(lengths);
    h.fn.assign(h.lengths.size(), std::vector<StageHandle>(static_cast<std::size_t>(dims_.layers)));
    return h;
  };
  // Batched lm_heads are found by name, as the batched decoder finds its functions: a bundle does
  // not record --decode-batches, and without them a verify segment's rows went through the
  // lm_head one by one (4 reads of the vocabulary's weights for a 4-row segment).
  for (std::int64_t b = 2; b <= frontend::StageParams::kMaxDecodeBatch; ++b)
    if (stages_.has_function(frontend::StageNames::lm_head(b)))
      head_fns_.emplace_back(b, StageHandle{});
  decode_fns_ = table(params_.decode_lengths());
  prefill_fns_ = table(params_.prefill_lengths());
  prefill_kv_fns_ = table(params_.prefill_lengths());
}

auto Session::prefill(const std::vector<std::int32_t>& tokens, bool all_rows,
                      const std::function<void(std::int64_t, std::int64_t)>& progress)
    -> std::vector<float> {
  std::vector<float> logits;
  feed(tokens, all_rows, progress, [&](int cur, std::int64_t r, std::int64_t) {
    append_logits(logits, hidden_[cur].data() + r * dims_.hidden);
  });
  return logits;
}

auto Session::prefill_hidden(
    const std::vector<std::int32_t>& tokens, bool all_rows,
    const std::function<void(std::int64_t, std::span<const float>)>& on_hidden) -> void {
  const auto H = static_cast<std::size_t>(dims_.hidden);
  feed(tokens, all_rows, {}, [&](int cur, std::int64_t r, std::int64_t i) {
    on_hidden(i, std::span<const float>(hidden_[cur]).subspan(static_cast<std::size_t>(r) * H, H));
  });
}

auto Session::check_feed(std::span<const std::int32_t> tokens) const -> void {
  const std::int64_t n = static_cast<std::int64_t>(tokens.size());
  check(n > 0, ErrorKind::invalid_input, "prompt", "is empty");
  const std::int64_t L = params_.max_input_length;
  check(length_ + n <= params_.seq_length, ErrorKind::invalid_input, "prompt", "prompt of ", n,
        " tokens after ", length_, " cached tokens exceeds the compiled sequence length ",
        params_.seq_length);
  check_ids(tokens);
  // Without prefill_kv modules (compiled with --no-history) a prompt must fit one prefill call
  // onto an empty cache; refused before any work, so the session is left as it was.
  if (!params_.with_history) {
    check(length_ == 0, ErrorKind::unsupported, "prompt", "continuing a conversation (", length_,
          " tokens already cached) needs the prefill_kv stage, and this bundle was compiled "
          "with --no-history; recompile without --no-history");
    check(n <= L, ErrorKind::unsupported, "prompt", "prompt of ", n,
          " tokens is longer than max_input_length ", L,
          " and this bundle has no prefill_kv stage to continue it (compiled with "
          "--no-history); recompile without --no-history, or with --max-input-length >= ",
          n);
  }
}

auto Session::feed(std::span<const std::int32_t> tokens, bool all_rows,
                   const std::function<void(std::int64_t, std::int64_t)>& progress,
                   const std::function<void(int, std::int64_t, std::int64_t)>& row) -> void {
  check_feed(tokens);
  const std::int64_t n = static_cast<std::int64_t>(tokens.size());
  const std::int64_t L = params_.max_input_length;
  for (std::int64_t start = 0; start < n; start += L) {
    const std::int64_t valid = std::min(L, n - start);
    const std::int64_t pos0 = length_;
    // The smallest compiled prefill variant that holds the segment: its first P rows of the
    // embedded buffer are the block's input.
    const std::int64_t P = params_.prefill_length_for(valid);
    if (pos0 + P > params_.seq_length) {
      // A padded segment would run past the cache: feed the tail token by token through the
      // decode stage instead (same results, no padding).
      for (std::int64_t r = start; r < n; ++r) {
        const int cur = decode_hidden(tokens[static_cast<std::size_t>(r)]);
        if (all_rows || r == n - 1)
          row(cur, 0, r);
      }
      if (progress)
        progress(n, n);
      break;
    }
    const int cur = local_segment(
        tokens.subspan(static_cast<std::size_t>(start), static_cast<std::size_t>(valid)), P);
    run_remote(pos0 > 0 ? BlockKind::prefill_kv : BlockKind::prefill, P, P, pos0, cur);
    length_ += valid;
    written_ = std::max(written_, pos0 + P);
    for (std::int64_t r = 0; r < valid; ++r)
      if (all_rows || start + r == n - 1)
        row(cur, r, start + r);
    if (progress)
      progress(start + valid, n);
  }
}

auto Session::local_segment(std::span<const std::int32_t> seg, std::int64_t P) -> int {
  const std::int64_t L = params_.max_input_length, pos0 = length_;
  const auto valid = static_cast<std::int64_t>(seg.size());
  for (std::int64_t r = 0; r < L; ++r) {
    ids_[r] = r < valid ? seg[static_cast<std::size_t>(r)] : 0;
    pos_[r] = static_cast<std::int32_t>(pos0 + r); // padded rows keep later positions
  }
  int cur = embed(embedding_fn_, "embedding", L);
  const bool hist = pos0 > 0;
  for (std::int64_t layer = 0; layer < local_layers(); ++layer) {
    const StageHandle fn =
        hist ? handle(prefill_kv_fns_, P, layer,
                      [&] { return frontend::StageNames::block_kv(layer, P, params_); })
             : handle(prefill_fns_, P, layer,
                      [&] { return frontend::StageNames::block(layer, P, params_); });
    block(fn, layer, P, pos0, hist ? params_.prefill_kv_history(P) : 0, cur);
    cur ^= 1;
  }
  return cur;
}

auto Session::segment_splits(std::int64_t n) const -> bool {
  return remote_ != nullptr && n >= 1 && n <= params_.max_input_length &&
         length_ + params_.prefill_length_for(n) <= params_.seq_length;
}

auto Session::begin_segment(std::span<const std::int32_t> tokens) -> void {
  check(segment_.rows == 0, ErrorKind::internal, "session", "a segment is already begun");
  const auto n = static_cast<std::int64_t>(tokens.size());
  check(segment_splits(n), ErrorKind::internal, "session", "a segment of ", n,
        " tokens at position ", length_, " cannot be begun alone");
  check_feed(tokens);
  const std::int64_t pos0 = length_, P = params_.prefill_length_for(n);
  const int cur = local_segment(tokens, P);
  const auto H = static_cast<std::size_t>(dims_.hidden);
  remote_->submit({pos0 > 0 ? BlockKind::prefill_kv : BlockKind::prefill, P, P, pos0, remote_slot_},
                  std::span<const float>(hidden_[cur]).first(static_cast<std::size_t>(P) * H),
                  std::span<const std::int32_t>(pos_).first(static_cast<std::size_t>(P)));
  segment_ = {n, P, pos0};
}

auto Session::finish_segment() -> std::vector<float> {
  check(segment_.rows > 0, ErrorKind::internal, "session", "no segment begun");
  const Segment seg = segment_;
  segment_ = {};
  const auto H = static_cast<std::size_t>(dims_.hidden);
  remote_->collect(std::span<float>(hidden_[0]).first(static_cast<std::size_t>(seg.P) * H));
  length_ = seg.pos0 + seg.rows;
  written_ = std::max(written_, seg.pos0 + seg.P);
  std::vector<float> logits;
  append_logits(logits, hidden_[0].data() + (seg.rows - 1) * dims_.hidden);
  return logits;
}

auto Session::decode(std::int32_t token) -> std::vector<float> {
  const int cur = decode_hidden(token);
  std::vector<float> logits;
  append_logits(logits, hidden_[cur].data());
  return logits;
}

auto Session::verify(std::span<const std::int32_t> tokens) -> std::vector<float> {
  const auto n = static_cast<std::int64_t>(tokens.size());
  const std::int64_t H = dims_.hidden, V = dims_.vocab;
  rows_.resize(static_cast<std::size_t>(std::max<std::int64_t>(n, 1) * H));
  feed(tokens, true, {}, [&](int cur, std::int64_t r, std::int64_t i) {
    std::copy_n(hidden_[cur].data() + r * H, H, rows_.data() + i * H);
  });
  std::vector<float> logits;
  if (remote_ && remote_->runs_head()) { // every row in as few calls as the slices allow
    logits.resize(static_cast<std::size_t>(n * V));
    remote_->head(std::span<const float>(rows_).first(static_cast<std::size_t>(n * H)), logits);
    return logits;
  }
  const auto [B, head] = n > 1 ? batched_head(n) : std::pair<std::int64_t, StageHandle>{};
  if (head.id >= 0) {
    rows_.resize(static_cast<std::size_t>(B * H));
    for (std::int64_t r = n; r < B; ++r) // padding rows repeat the last one
      std::copy_n(rows_.data() + (n - 1) * H, H, rows_.data() + r * H);
    logits.resize(static_cast<std::size_t>(B * V));
    const ConstBytes in[] = {cbytes(rows_.data(), B * H)};
    const MutBytes out[] = {mbytes(logits.data(), B * V)};
    stages_.run(head, in, out);
    logits.resize(static_cast<std::size_t>(n * V));
    return logits;
  }
  for (std::int64_t i = 0; i < n; ++i)
    append_logits(logits, rows_.data() + i * H);
  return logits;
}

auto Session::batched_head(std::int64_t n) -> std::pair<std::int64_t, StageHandle> {
  for (auto& [b, h] : head_fns_) {
    if (b < n)
      continue;
    if (h.id == -1)
      h = stages_.resolve(frontend::StageNames::lm_head(b));
    return {b, h};
  }
  return {0, StageHandle{}};
}

auto Session::decode_hidden(std::int32_t token) -> int {
  check_room();
  const std::int64_t p = length_;
  check_ids(std::span<const std::int32_t>(&token, 1));
  const std::int64_t S = decode_length_for(p);
  ids_[0] = token;
  pos_[0] = static_cast<std::int32_t>(p);
  int cur = embed(embedding_cache_fn_, "embedding_cache", 1);
  for (std::int64_t layer = 0; layer < local_layers(); ++layer) {
    block(
        handle(decode_fns_, S, layer, [&] { return frontend::StageNames::block_cache(layer, S); }),
        layer, 1, p, S, cur);
    cur ^= 1;
  }
  run_remote(BlockKind::decode, 1, S, p, cur);
  length_ += 1;
  written_ = std::max(written_, length_);
  return cur;
}

auto Session::generate(const std::vector<std::int32_t>& prompt, const GenerateOptions& options,
                       const std::function<void(std::int32_t)>& on_token) -> GenerateResult {
  Generation gen(options, nullptr, prompt);
  if (!on_token)
    return generate(prompt, gen);
  return generate(prompt, gen, [&](const GenerationStep& s) { on_token(s.token); });
}

auto Session::generate(const std::vector<std::int32_t>& prompt, Generation& gen,
                       const std::function<void(const GenerationStep&)>& on_step)
    -> GenerateResult {
  // One loop for plain and speculative decoding: without drafts (draft_max 0, or none found)
  // a step is one decode; with a draft, one verify segment and as many steps as it holds.
  const SpeculationOptions& spec = gen.options().speculation;
  using clock = std::chrono::steady_clock;
  GenerateResult res;
  res.prompt_tokens = static_cast<std::int64_t>(prompt.size());
  const auto t0 = clock::now();
  // Takes the next answer token from `logits` with `length` tokens fed; true when it ends the
  // answer.
  auto take = [&](std::span<const float> logits, std::int64_t length) {
    const GenerationStep step = gen.step(logits, length, params_.seq_length);
    if (gen.generated() == 1)
      res.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
    res.tokens.push_back(step.token);
    if (on_step)
      on_step(step);
    if (step.stop)
      res.reason = *step.stop;
    return step.stop.has_value();
  };
  const auto V = static_cast<std::size_t>(dims_.vocab);
  DraftLength length(verify_draft_max(params_, spec.draft_max), spec.draft_cost);
  // (The logits first: a call's arguments are evaluated in no fixed order.)
  const auto first = prefill(prompt, false);
  res.draft_prefill_seconds = prepare_draft(spec, gen.context()); // a draft model catches up
  bool done = take(first, length_);
  while (!done) {
    const std::int32_t last = res.tokens.back();
    double draft_seconds = 0;
    const auto draft =
        next_draft(spec, length, gen.context(), params_.seq_length - length_,
                   static_cast<std::int64_t>(gen.options().stop.max_new_tokens) - gen.generated(),
                   draft_seconds);
    res.speculation.draft_seconds += draft_seconds;
    if (draft.empty()) {
      const auto s0 = clock::now();
      const auto logits = decode(last);
      length.observe_step(std::chrono::duration<double>(clock::now() - s0).count());
      done = take(logits, length_);
      continue;
    }
    std::vector<std::int32_t> segment{last};
    segment.insert(segment.end(), draft.begin(), draft.end());
    const std::int64_t L0 = length_;
    const auto v0 = clock::now();
    const auto rows = verify(segment);
    const double verify_seconds = std::chrono::duration<double>(clock::now() - v0).count();
    length.observe(draft_seconds, verify_seconds, static_cast<int>(draft.size()));
    res.speculation.verify_seconds += verify_seconds;
    const auto d = static_cast<std::int64_t>(draft.size());
    std::int64_t used = 0, accepted = 0;
    for (std::int64_t i = 0; i <= d && !done; ++i) {
      used = i + 1;
      done = take(std::span<const float>(rows).subspan(static_cast<std::size_t>(i) * V, V),
                  L0 + i + 1);
      if (done || i == d || res.tokens.back() != draft[static_cast<std::size_t>(i)])
        break;
      ++accepted;
    }
    truncate(L0 + used); // the rows after the last one used were a draft that was not kept
    res.speculation.verify_calls += 1;
    res.speculation.drafted += d;
    res.speculation.accepted += accepted;
    length.record(static_cast<int>(d), static_cast<int>(accepted));
  }
  res.decode_seconds =
      std::chrono::duration<double>(clock::now() - t0).count() - res.prefill_seconds;
  return res;
}

auto Session::decode_length_for(const std::vector<std::int64_t>& lengths, std::int64_t p)
    -> std::int64_t {
  std::int64_t best = -1;
  for (auto s : lengths)
    if (s >= p && (best < 0 || s < best))
      best = s;
  check(best >= 0, ErrorKind::invalid_input, "decode", "no decode variant holds ", p,
        " history tokens");
  return best;
}

auto Session::embed(StageHandle& fn, const char* name, std::int64_t L) -> int {
  const ConstBytes in[] = {cbytes(ids_.data(), L)};
  const MutBytes out[] = {mbytes(hidden_[0].data(), L * dims_.hidden)};
  stages_.run(once(fn, name), in, out);
  return 0;
}

auto Session::block(StageHandle fn, std::int64_t layer, std::int64_t L, std::int64_t pos0,
                    std::int64_t S, int cur) -> void {
  const std::int64_t H = dims_.hidden;
  ConstBytes in[4] = {cbytes(hidden_[cur].data(), L * H), cbytes(pos_.data(), L), {}, {}};
  MutBytes out[3] = {mbytes(hidden_[cur ^ 1].data(), L * H), {}, {}};
  if (!stages_.owns_kv_cache()) {
    check(pos0 + L <= params_.seq_length, ErrorKind::internal, "session", "slots beyond the cache");
    auto& kc = k_cache_[static_cast<std::size_t>(layer)];
    auto& vc = v_cache_[static_cast<std::size_t>(layer)];
    if (S > 0) {
      in[2] = cbytes(kc.data(), S * row());
      in[3] = cbytes(vc.data(), S * row());
    }
    out[1] = mbytes(kc.data() + pos0 * row(), L * row());
    out[2] = mbytes(vc.data() + pos0 * row(), L * row());
  }
  // history arguments (empty when the executor owns the cache) only when the function has them
  stages_.run(fn, std::span<const ConstBytes>(in, S > 0 ? 4 : 2), out);
}

auto Session::run_remote(BlockKind kind, std::int64_t rows, std::int64_t variant, std::int64_t pos0,
                         int cur) -> void {
  if (!remote_)
    return;
  const auto H = static_cast<std::size_t>(dims_.hidden);
  remote_->run({kind, rows, variant, pos0, remote_slot_},
               std::span<float>(hidden_[cur]).first(static_cast<std::size_t>(rows) * H),
               std::span<const std::int32_t>(pos_).first(static_cast<std::size_t>(rows)));
}

auto Session::append_logits(std::vector<float>& logits, const float* row) -> void {
  const std::size_t at = logits.size();
  logits.resize(at + static_cast<std::size_t>(dims_.vocab));
  if (remote_ && remote_->runs_head()) { // tensor parallel: every rank its slice
    remote_->head(std::span<const float>(row, static_cast<std::size_t>(dims_.hidden)),
                  std::span<float>(logits).subspan(at));
    return;
  }
  const ConstBytes in[] = {cbytes(row, dims_.hidden)};
  const MutBytes out[] = {mbytes(logits.data() + at, dims_.vocab)};
  stages_.run(once(lm_head_fn_, "lm_head"), in, out);
}

} // namespace tpullm::runtime
