// SlotPool: slots, their states and one scheduler round (slot_pool.hpp).
#include "tpullm/runtime/slot_pool.hpp"

#include <algorithm>
#include <chrono>
#include <deque>

#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/executor.hpp"
#include "tpullm/runtime/prompt_cache.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::runtime {

std::string_view to_string(SlotState s) noexcept {
  switch (s) {
  case SlotState::idle:
    return "idle";
  case SlotState::prefill:
    return "prefill";
  case SlotState::generating:
    return "generating";
  }
  return "unknown";
}

/// One conversation: its KV slot of the executor, the session and prompt cache over it, and the
/// request it answers (with its progress).
struct SlotPool::Slot {
  int index = 0;
  std::unique_ptr<CompiledStages> stages;
  std::unique_ptr<Session> session;
  std::unique_ptr<PromptCache> cache; ///< the ids in the KV cache; what a prompt reuses
  std::uint64_t last_used = 0;

  SlotState state = SlotState::idle;
  std::vector<std::int32_t> prompt;
  std::optional<Generation> gen; ///< the answer: sampler, stop rules, text
  std::size_t fed = 0;           ///< prompt tokens in the cache
  std::int64_t cached = 0;       ///< prompt tokens found there at start()
  std::int32_t last = 0;         ///< the last chosen token (fed at the next decode step)
  DraftLength draft_length{0};   ///< speculation's adaptive draft length for this answer
  double draft_seconds = 0;      ///< what this round's draft took (DraftLength::observe)
};

SlotPool::SlotPool(Executor& exec, SessionDims dims, frontend::StageParams params,
                   const text::Tokenizer* tok)
    : exec_(exec), params_(params), tok_(tok), decoder_(exec, dims, params) {
  const auto n = exec_.kv_geometry().slots;
  check(n >= 1, ErrorKind::invalid_input, "slot pool", "the executor has no KV slot");
  for (std::int64_t i = 0; i < n; ++i) {
    auto s = std::make_unique<Slot>();
    s->index = static_cast<int>(i);
    s->stages = std::make_unique<CompiledStages>(exec_, static_cast<std::int32_t>(i));
    s->session = std::make_unique<Session>(*s->stages, dims, params_);
    s->cache = std::make_unique<PromptCache>(*s->session);
    slots_.push_back(std::move(s));
  }
}

SlotPool::~SlotPool() = default;

SlotState SlotPool::state(int slot) const {
  check(slot >= 0 && slot < size(), ErrorKind::invalid_input, "slot pool", "slot ", slot,
        " is outside [0, ", size(), ")");
  return slots_[static_cast<std::size_t>(slot)]->state;
}

bool SlotPool::busy() const {
  return std::any_of(slots_.begin(), slots_.end(),
                     [](const auto& s) { return s->state != SlotState::idle; });
}

std::optional<int> SlotPool::pick(const std::vector<std::int32_t>& prompt) const {
  const Slot* best = nullptr;
  std::int64_t best_reuse = 0;
  for (const auto& s : slots_) {
    if (s->state != SlotState::idle)
      continue;
    const std::int64_t r = s->cache->reusable(prompt);
    if (!best || r > best_reuse || (r == best_reuse && s->last_used < best->last_used)) {
      best = s.get();
      best_reuse = r;
    }
  }
  if (!best)
    return std::nullopt;
  return best->index;
}

void SlotPool::start(int slot, const SlotRequest& request) {
  if (state(slot) != SlotState::idle)
    throw BusyError("slot pool",
                    str_cat("slot ", slot, " is ", to_string(state(slot)), ", not idle"));
  check(!request.prompt.empty(), ErrorKind::invalid_input, "prompt", "is empty");
  Slot& s = *slots_[static_cast<std::size_t>(slot)];
  s.gen.emplace(request.options, tok_, request.prompt); // validates the options first
  s.draft_length = DraftLength(verify_draft_max(params_, request.options.speculation.draft_max),
                               request.options.speculation.draft_cost);
  s.prompt = request.prompt;
  s.cached = s.cache->keep_prefix(s.prompt);
  s.fed = static_cast<std::size_t>(s.cached);
  s.state = SlotState::prefill;
}

void SlotPool::release(Slot& s) {
  s.state = SlotState::idle;
  s.gen.reset();
  s.prompt.clear();
  s.last_used = ++clock_;
}

void SlotPool::cancel(int slot) {
  Slot& s = *slots_[static_cast<std::size_t>(slot)];
  (void)state(slot); // range check
  if (s.state != SlotState::idle)
    release(s);
}

SlotEvent SlotPool::event_of(const Slot& s) const {
  SlotEvent e;
  e.slot = s.index;
  e.prompt_tokens = static_cast<std::int64_t>(s.prompt.size());
  e.cached_tokens = s.cached;
  e.generated = s.gen ? s.gen->generated() : 0;
  return e;
}

SlotRound SlotPool::step() {
  SlotRound round;
  // Slots in their prompt take one prefill segment each (or their first token); the slots
  // generating decode their next token together, in one batched decode call when the bundle has
  // one (continuous batching: a slot joins or leaves between rounds).
  std::vector<Slot*> decoding, segments;
  // Drafts for a slot that generates alone (see the file comment).
  const auto generating = std::count_if(slots_.begin(), slots_.end(), [](const auto& s) {
    return s->state == SlotState::generating;
  });
  const bool may_draft = draft_beside_batch_ || !decoder_.batched() || generating <= 1;
  for (auto& s : slots_) {
    if (s->state == SlotState::idle)
      continue;
    if (s->state == SlotState::generating && may_draft) {
      if (const auto draft = draft_for(*s); !draft.empty()) {
        speculate(*s, draft, round); // alone: one verify call of 1 + k rows
        continue;
      }
    }
    if (s->state == SlotState::generating && (decoder_.batched() || remote_))
      decoding.push_back(s.get());
    else if (s->state == SlotState::prefill && remote_ &&
             s->session->segment_splits(next_segment(*s)))
      segments.push_back(s.get()); // in flight beside the decode (pipeline)
    else
      step_one(*s, round); // (with a pipeline: before anything is in flight)
  }
  if (remote_ && (!decoding.empty() || !segments.empty()))
    decode_pipelined(decoding, segments, round);
  else if (decoding.size() == 1)
    step_one(*decoding[0], round);
  else if (!decoding.empty())
    decode_together(decoding, round);
  return round;
}

std::int64_t SlotPool::next_segment(const Slot& s) const {
  return static_cast<std::int64_t>(std::min<std::size_t>(
      s.prompt.size() - s.fed, static_cast<std::size_t>(params_.max_input_length)));
}

std::span<const std::int32_t> SlotPool::segment_of(const Slot& s) const {
  return std::span<const std::int32_t>(s.prompt).subspan(s.fed,
                                                         static_cast<std::size_t>(next_segment(s)));
}

bool SlotPool::segment_fed(Slot& s, std::span<const std::int32_t> seg, SlotRound& round) {
  s.cache->record(seg);
  s.fed += seg.size();
  round.prefill_segments += 1;
  if (s.fed < s.prompt.size())
    return false;
  s.state = SlotState::generating;
  (void)prepare_draft(s.gen->options().speculation, s.gen->context()); // the draft catches up
  return true;
}

void SlotPool::step_one(Slot& s, SlotRound& round) {
  try {
    std::vector<float> logits;
    if (s.state == SlotState::prefill) {
      // One prefill segment per round (max_input_length tokens), so other slots go on between.
      const auto seg = segment_of(s);
      logits = s.session->prefill(std::vector<std::int32_t>(seg.begin(), seg.end()), false);
      if (!segment_fed(s, seg, round))
        return;
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      logits = s.session->decode(s.last);
      // a lone decode step: what this slot's drafts are priced against (DraftLength)
      s.draft_length.observe_step(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      s.cache->record(std::span<const std::int32_t>(&s.last, 1));
    }
    consume(s, logits, round);
  } catch (...) { // e.g. out of memory: this request fails, the others go on
    fail(s, round);
  }
}

std::vector<std::int32_t> SlotPool::draft_for(Slot& s) {
  const SpeculationOptions& spec = s.gen->options().speculation;
  if (spec.draft_max == 0)
    return {};
  return next_draft(
      spec, s.draft_length, s.gen->context(), params_.seq_length - s.session->length(),
      static_cast<std::int64_t>(s.gen->options().stop.max_new_tokens) - s.gen->generated(),
      s.draft_seconds);
}

void SlotPool::speculate(Slot& s, const std::vector<std::int32_t>& draft, SlotRound& round) {
  try {
    std::vector<std::int32_t> segment{s.last};
    segment.insert(segment.end(), draft.begin(), draft.end());
    const std::int64_t L0 = s.session->length();
    const auto t0 = std::chrono::steady_clock::now();
    const auto rows = s.session->verify(segment);
    s.draft_length.observe(
        s.draft_seconds,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
        static_cast<int>(draft.size()));
    const auto V = rows.size() / segment.size();
    const auto d = static_cast<std::int64_t>(draft.size());
    std::int64_t used = 0, accepted = 0;
    for (std::int64_t i = 0; i <= d; ++i) {
      used = i + 1;
      // Row i's token is chosen with L0 + i + 1 tokens fed (the sequence-end rule's length).
      consume(s, std::span<const float>(rows).subspan(static_cast<std::size_t>(i) * V, V), round,
              L0 + i + 1);
      if (s.state != SlotState::generating || i == d ||
          s.last != draft[static_cast<std::size_t>(i)])
        break;
      ++accepted;
    }
    s.session->truncate(L0 + used); // the rows after the last one used were not kept
    s.cache->record(std::span<const std::int32_t>(segment.data(), static_cast<std::size_t>(used)));
    round.speculation.verify_calls += 1;
    round.speculation.drafted += d;
    round.speculation.accepted += accepted;
    s.draft_length.record(static_cast<int>(d), static_cast<int>(accepted));
  } catch (...) {
    fail(s, round);
  }
}

void SlotPool::decode_together(const std::vector<Slot*>& slots, SlotRound& round) {
  std::vector<DecodeRow> rows;
  for (Slot* s : slots)
    rows.push_back({s->session.get(), s->index, s->last});
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    logits = decoder_.decode(rows);
  } catch (...) {
    for (Slot* s : slots)
      fail(*s, round);
    return;
  }
  // Slots that draft beside a batch price their drafts against the round's decode; otherwise
  // a slot drafts only alone, against its lone steps (step_one), not against a batched round.
  if (draft_beside_batch_) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (Slot* s : slots)
      s->draft_length.observe_step(seconds);
  }
  round.decode_batch = static_cast<std::int64_t>(slots.size());
  consume_batch(slots, logits, round);
}

void SlotPool::consume_batch(const std::vector<Slot*>& slots, std::span<const float> logits,
                             SlotRound& round) {
  const auto V = logits.size() / slots.size();
  for (std::size_t r = 0; r < slots.size(); ++r) {
    Slot& s = *slots[r];
    try {
      s.cache->record(std::span<const std::int32_t>(&s.last, 1));
      consume(s, logits.subspan(r * V, V), round);
    } catch (...) {
      fail(s, round);
    }
  }
}

void SlotPool::set_remote_layers(RemoteLayers* remote, int micro_batches, int steps_per_round) {
  check(micro_batches >= 1 && micro_batches <= 64, ErrorKind::invalid_input, "micro-batches",
        "must be in [1, 64], got ", micro_batches);
  check(steps_per_round >= 1 && steps_per_round <= 64, ErrorKind::invalid_input, "pipeline steps",
        "must be in [1, 64], got ", steps_per_round);
  check(!busy(), ErrorKind::internal, "slot pool", "the remote layers changed while busy");
  decoder_.set_remote_layers(remote); // checks the layer count
  for (auto& s : slots_)
    s->session->set_remote_layers(remote, static_cast<std::int32_t>(s->index));
  remote_ = remote;
  micro_batches_ = micro_batches;
  steps_per_round_ = steps_per_round;
}

void SlotPool::decode_pipelined(const std::vector<Slot*>& slots, const std::vector<Slot*>& segments,
                                SlotRound& round) {
  // Contiguous groups of nearly equal size, each within the largest batch (one slot each
  // without batched decode).
  const auto n = static_cast<std::int64_t>(slots.size());
  const std::int64_t most = max_decode_batch();
  const std::int64_t groups =
      std::min(n, std::max<std::int64_t>(micro_batches_, (n + most - 1) / most));
  struct Flight {
    std::vector<Slot*> slots; ///< a decode micro-batch, or the one slot of a prompt segment
    int steps = 0;            ///< steps of this round begun for the group
    std::span<const std::int32_t> segment; ///< a prompt segment's tokens (empty: a decode)
  };
  std::deque<Flight> flight; // begun, oldest first
  auto begin = [&](Flight f) {
    std::vector<DecodeRow> rows;
    for (Slot* s : f.slots)
      rows.push_back({s->session.get(), s->index, s->last});
    try {
      decoder_.begin(rows);
      f.steps += 1;
      round.micro_batches += 1;
      flight.push_back(std::move(f));
    } catch (...) {
      for (Slot* s : f.slots)
        fail(*s, round);
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t g = 0, at = 0; g < groups; ++g) {
    const std::int64_t size = (n - at) / (groups - g);
    begin({std::vector<Slot*>(slots.begin() + at, slots.begin() + at + size), 0, {}});
    at += size;
  }
  // Prompt segments behind the decode steps: their other ranks' layers run while rank 0
  // finishes the decode steps, and the decode steps' next ones run while the segments are away.
  for (Slot* s : segments) {
    const auto seg = segment_of(*s);
    try {
      s->session->begin_segment(seg);
      flight.push_back({{s}, 1, seg});
    } catch (...) {
      fail(*s, round);
    }
  }
  // Each group in turn: its step finished, its tokens chosen, and (for up to steps_per_round_
  // steps) its next step begun at once, while the other groups' steps are on the other ranks.
  std::int64_t steps = 0;
  while (!flight.empty()) {
    Flight f = std::move(flight.front());
    flight.pop_front();
    if (!f.segment.empty()) {
      Slot& s = *f.slots[0];
      try {
        const auto logits = s.session->finish_segment();
        if (segment_fed(s, f.segment, round))
          consume(s, logits, round); // the answer's first token
      } catch (...) {
        fail(s, round);
      }
      continue;
    }
    std::vector<float> logits;
    try {
      logits = decoder_.finish();
    } catch (...) {
      for (Slot* s : f.slots)
        fail(*s, round);
      continue;
    }
    steps += 1;
    round.decode_batch += static_cast<std::int64_t>(f.slots.size());
    consume_batch(f.slots, logits, round);
    if (f.steps >= steps_per_round_)
      continue;
    std::erase_if(f.slots, [](Slot* s) { return s->state != SlotState::generating; });
    if (!f.slots.empty())
      begin(std::move(f));
  }
  if (draft_beside_batch_ && steps > 0) {
    // a step of one group's, on average: what a draft is priced against
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() *
        static_cast<double>(std::max<std::int64_t>(groups, 1)) / static_cast<double>(steps);
    for (Slot* s : slots)
      if (s->state == SlotState::generating)
        s->draft_length.observe_step(seconds);
  }
}

void SlotPool::consume(Slot& s, std::span<const float> logits, SlotRound& round,
                       std::int64_t length) {
  GenerationStep step =
      s.gen->step(logits, length < 0 ? s.session->length() : length, params_.seq_length);
  s.last = step.token;
  SlotEvent e = event_of(s);
  e.token = step.token;
  e.text = step.text;
  e.first_token = s.gen->generated() == 1;
  e.stop = step.stop;
  e.logprobs = std::move(step.logprobs);
  round.events.push_back(std::move(e));
  if (step.stop)
    release(s);
}

void SlotPool::fail(Slot& s, SlotRound& round) {
  SlotEvent e = event_of(s);
  e.error = std::current_exception();
  round.events.push_back(std::move(e));
  // What the cache holds after a failed step is not known: forget it.
  s.cache->reset();
  release(s);
}

} // namespace tpullm::runtime
