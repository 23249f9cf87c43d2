// tpullm serve FILE.bundle: an OpenAI-compatible HTTP server (cpp-httplib, with the connection
// handling of serve_http.hpp) over a bundle. HTTP threads parse requests, render chats through
// the bundle's chat template (concurrently, under no lock), tokenize and wait for text; one
// scheduler thread (serve_scheduler.hpp) owns all compute. Writes only its log (stderr). SIGINT /
// SIGTERM end the in-flight requests and exit 0 within a bound; a second signal exits at once.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include <httplib.h>

#include "bundle_source.hpp"
#include "command.hpp"
#include "pipeline_run.hpp"
#include "sampling_options.hpp"
#include "serve_api.hpp"
#include "serve_http.hpp"
#include "serve_metrics.hpp"
#include "serve_scheduler.hpp"
#include "tpullm/frontend/memory_estimate.hpp"
#include "tpullm/runtime/compiled_stages.hpp"
#include "tpullm/runtime/conversation.hpp"
#include "tpullm/runtime/embeddings.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/runtime/text_side.hpp"

namespace tpullm::cli {

namespace {

using serve::ApiError;

/// Request bodies larger than this get 413, whatever their framing (documented in
/// docs/serve.md).
constexpr std::size_t kMaxBodyBytes = 1 << 20;
/// After the first SIGINT / SIGTERM: connections still open this long are closed ...
constexpr std::chrono::milliseconds kStopGrace{2000};
/// ... and the process exits this long after the signal whatever still runs (a long chat
/// template render, a model step): status 1 then, 0 when everything ended before.
constexpr std::chrono::milliseconds kStopBound{5000};
/// Slots --slots defaults to at most without batched decode (more do not decode faster); with
/// it, the largest compiled decode batch when that is more.
constexpr int kDefaultMaxSlots = 4;

/// The largest batched decode the bundle was compiled with (lm_head_bB present), else 1.
int largest_decode_batch(const bundle::Bundle& b) {
  int best = 1;
  for (const auto& p : b.programs())
    for (int n = best + 1; n <= static_cast<int>(frontend::StageParams::kMaxDecodeBatch); ++n)
      if (p.name == frontend::StageNames::lm_head(n))
        best = n;
  return best;
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 503)
    res.set_header("Retry-After", "1");
  res.set_content(serve::error_body(e), "application/json");
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

/// Whether `got` equals `key`, in a time that depends on the lengths only (not on where they
/// differ).
bool same_key(std::string_view got, std::string_view key) {
  unsigned diff = got.size() != key.size();
  for (std::size_t i = 0; i < key.size(); ++i)
    diff |= static_cast<unsigned char>(key[i]) ^
            static_cast<unsigned char>(i < got.size() ? got[i] : 0);
  return diff == 0;
}

/// Refuses a request whose body stays unread: the connection is closed after the answer (the
/// body's bytes must not be read as the next request).
[[noreturn]] void refuse_unread(ApiError e) {
  serve::ConnectionControl::close_after_answer();
  throw e;
}

/// The request body, read through `reader` and cut at kMaxBodyBytes whatever the framing
/// (Content-Length, chunked, or none: up to the end of the client's sending side). 413 past the
/// bound, 408 when the request's time bound passes, 400 for a malformed framing.
std::string read_body(const httplib::Request& req, const httplib::ContentReader& reader,
                      const std::atomic<bool>& stopping) {
  const bool has_te = req.has_header("Transfer-Encoding");
  if (has_te && !iequals(req.get_header_value("Transfer-Encoding"), "chunked"))
    refuse_unread(ApiError{400, "only 'Transfer-Encoding: chunked' is accepted",
                           "invalid_request_error", "", "bad_framing"});
  if (req.has_header("Content-Length")) {
    const std::string v = req.get_header_value("Content-Length");
    if (has_te || req.get_header_value_count("Content-Length") != 1 || v.empty() || v.size() > 18 ||
        v.find_first_not_of("0123456789") != std::string::npos)
      refuse_unread(ApiError{400,
                             "Content-Length must be one decimal number (and not be sent with "
                             "Transfer-Encoding)",
                             "invalid_request_error", "", "bad_framing"});
    if (std::stoull(v) > kMaxBodyBytes)
      refuse_unread(ApiError{
          413, "the request body is larger than " + std::to_string(kMaxBodyBytes) + " bytes",
          "invalid_request_error", "", "body_too_large"});
  }
  std::string body;
  bool over = false;
  const bool ok = reader([&](const char* data, std::size_t n) {
    if (body.size() + n > kMaxBodyBytes) {
      over = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (ok)
    return body;
  if (over || serve::ConnectionControl::request_too_large())
    refuse_unread(
        ApiError{413, "the request body is larger than " + std::to_string(kMaxBodyBytes) + " bytes",
                 "invalid_request_error", "", "body_too_large"});
  if (serve::ConnectionControl::request_timed_out())
    refuse_unread(ApiError{408, "the request body did not arrive in time", "invalid_request_error",
                           "", "request_timeout"});
  if (stopping)
    refuse_unread(
        ApiError{503, "the server is shutting down", "server_error", "", "shutting_down"});
  refuse_unread(ApiError{400,
                         "the request body could not be read (a malformed chunked framing, or "
                         "the connection closed before its end)",
                         "invalid_request_error", "", "bad_framing"});
}

/// Tool-call ids of an answer: "call_" + its number + "_" + the call's index (unique per
/// server run, and the same in a streamed answer as in the whole one).
std::string call_id_prefix(const serve::AnswerIds& ids) {
  return "call_" + ids.id.substr(ids.id.find('-') + 1) + "_";
}

/// The server's shared state.
struct Server {
  Server(std::shared_ptr<const bundle::Bundle> b, runtime::TextSide t)
      : bundle(std::move(b)), text(std::move(t)) {}

  std::shared_ptr<const bundle::Bundle> bundle;
  runtime::TextSide text;
  std::string model_id;
  std::string api_key;
  serve::RequestLimits limits;
  serve::Metrics metrics;
  std::unique_ptr<serve::Scheduler> scheduler;
  std::atomic<std::uint64_t> next_id{1};
  std::atomic<int> streams{0};                       ///< streaming answers still being written
  std::atomic<bool> stopping{false};                 ///< a stop signal came
  runtime::Pooling pooling = runtime::Pooling::last; ///< --pooling of /v1/embeddings
  /// --context-overflow: what a chat request too long for the compiled sequence gets.
  runtime::ContextOverflow overflow = runtime::ContextOverflow::refuse;
  std::size_t max_queue = 8; ///< --max-queue
  std::int64_t cores = 0;    ///< --threads (0: the bundle target's)
  bool pipeline = false;     ///< --parallel pipeline: the layers are spread over MPI ranks

  /// /v1/embeddings computes on an executor of its own (one KV slot, built at the first such
  /// request), never on the scheduler's: it cannot touch a slot's cache or race with the
  /// scheduler thread. Requests take turns under embed_m; one computes and at most max_queue
  /// wait (more get 503).
  std::mutex embed_m;
  std::unique_ptr<runtime::Executor> embed_exec;         ///< under embed_m
  std::unique_ptr<runtime::CompiledStages> embed_stages; ///< under embed_m
  std::unique_ptr<runtime::Session> embed_session;       ///< under embed_m
  std::atomic<std::size_t> embed_in_flight{0};           ///< computing or waiting for embed_m

  /// 401 unless the request carries `Authorization: Bearer KEY` (the scheme in any case, RFC
  /// 7235; the key compared in constant time). The connection closes after a 401 (a body is
  /// not read for a client without the key).
  void authorize(const httplib::Request& req) const {
    if (api_key.empty())
      return;
    const std::string got = req.get_header_value("Authorization");
    std::string_view token;
    if (got.size() > 7 && iequals(std::string_view(got).substr(0, 6), "bearer") &&
        (got[6] == ' ' || got[6] == '\t')) {
      token = std::string_view(got).substr(7);
      const auto first = token.find_first_not_of(" \t");
      const auto last = token.find_last_not_of(" \t");
      token = first == std::string_view::npos ? std::string_view()
                                              : token.substr(first, last - first + 1);
    }
    if (!same_key(token, api_key))
      refuse_unread(ApiError{401, "invalid API key (send 'Authorization: Bearer KEY')",
                             "authentication_error", "", "invalid_api_key"});
  }

  /// The prompt's token ids: a chat rendered through the template, text tokenized (special
  /// tokens added), ids checked against the vocabulary.
  std::vector<std::int32_t> prompt_of(const serve::GenerationRequest& g) {
    try {
      if (g.chat) {
        if (!text.chat_template)
          throw ApiError{400,
                         "no chat template: " + text.tokenizer.config().no_chat_template_reason() +
                             "; use /v1/completions",
                         "invalid_request_error", "messages", "no_chat_template"};
        // Rendered on this request's own thread under no lock, as Conversation renders: a
        // render is const (its state is the call's), so a long one delays nobody else.
        return render_tools_chat(g.messages, g.tools.list);
      }
      if (g.prompt_text)
        return text.tokenizer.encode(*g.prompt_text, true);
    } catch (const text::RenderCancelled&) {
      throw ApiError{503, "the server is shutting down", "server_error", "", "shutting_down"};
    } catch (const Error& e) {
      throw ApiError{400, e.what(), "invalid_request_error", g.chat ? "messages" : "prompt", ""};
    }
    const auto vocab = bundle->model().vocab;
    for (auto id : g.prompt_ids)
      if (id >= vocab)
        throw ApiError{400,
                       "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                           std::to_string(vocab) + ")",
                       "invalid_request_error", "prompt", "invalid_value"};
    return g.prompt_ids;
  }

  /// --context-overflow truncate-middle: a chat whose prompt leaves fewer tokens than the
  /// answer's room (max_tokens, else a quarter of the sequence; at most half) loses its
  /// earliest turns (runtime::truncate_middle), said in the answer's
  /// X-Tpullm-Context-Truncated header and on the log; 400 context_length_exceeded when even
  /// the system messages and the last turn leave no room.
  void truncate_to_fit(serve::GenerationRequest& g, std::vector<std::int32_t>& prompt,
                       httplib::Response& res) const {
    const std::int64_t seq = bundle->model().params.seq_length;
    std::optional<runtime::Truncation> cut;
    try {
      cut = runtime::truncate_to_fit(
          g.messages, prompt, seq, g.max_tokens.value_or(seq / 4),
          [&](const nlohmann::ordered_json& m) { return render_tools_chat(m, g.tools.list); });
    } catch (const text::RenderCancelled&) {
      throw ApiError{503, "the server is shutting down", "server_error", "", "shutting_down"};
    } catch (const Error& e) {
      throw ApiError{400, e.what(), "invalid_request_error", "messages",
                     e.kind() == ErrorKind::invalid_input ? "context_length_exceeded" : ""};
    }
    if (!cut)
      return;
    const runtime::Truncation& t = *cut;
    g.messages = t.messages;
    prompt = t.prompt;
    res.set_header("X-Tpullm-Context-Truncated",
                   "messages=" + std::to_string(t.dropped_messages) +
                       "; tokens=" + std::to_string(t.dropped_tokens));
    std::cerr << "tpullm serve: context full: the " << t.dropped_messages
              << " earliest messages of a chat (" << t.dropped_tokens << " tokens) left out\n";
  }

  /// The chat `messages` rendered with `tools`. An assistant message with tool_calls and null
  /// content goes to the template as transformers passes it (null); a template that fails on
  /// that (Qwen3's) is rendered again with "" in its place.
  /// The render stops at its next step once a stop signal came (text::RenderCancelled).
  std::vector<std::int32_t> render_tools_chat(const nlohmann::ordered_json& messages,
                                              const nlohmann::ordered_json& tools) const {
    text::RenderLimits limits;
    limits.cancel = &stopping;
    const auto kwargs = nlohmann::ordered_json::object();
    try {
      return runtime::render_chat(text.tokenizer, *text.chat_template, messages, tools, kwargs,
                                  limits);
    } catch (const text::RenderCancelled&) {
      throw;
    } catch (const Error&) {
      auto retry = serve::with_empty_tool_call_content(messages);
      if (!retry)
        throw;
      return runtime::render_chat(text.tokenizer, *text.chat_template, *retry, tools, kwargs,
                                  limits);
    }
  }

  /// The tool-call format of this model for a request that parses calls; 400 (param tools)
  /// when the chat template has none.
  runtime::ToolCallFormat tool_format() const {
    if (!text.chat_template)
      throw ApiError{400,
                     "no chat template: " + text.tokenizer.config().no_chat_template_reason() +
                         "; use /v1/completions",
                     "invalid_request_error", "messages", "no_chat_template"};
    try {
      return runtime::detect_tool_call_format(text.chat_template->source(), bundle->model().family);
    } catch (const Error& e) {
      throw ApiError{400, e.what(), "invalid_request_error", "tools", "unsupported_value"};
    }
  }

  /// POST /v1/embeddings: each input tokenized (text: special tokens added, as /v1/completions)
  /// and checked, then embedded in order (runtime/embeddings.hpp) with --pooling, normalized.
  void embeddings(const httplib::Request& req, const httplib::ContentReader& reader,
                  httplib::Response& res) {
    authorize(req);
    const std::string body = read_body(req, reader, stopping);
    const auto e = serve::parse_embeddings_request(body, model_id, limits);
    // Its executor would run every layer here, touching the weights the other ranks hold.
    if (pipeline)
      throw ApiError{501, "/v1/embeddings is not served with --parallel pipeline or tensor",
                     "invalid_request_error", "", "unsupported"};
    const auto& m = bundle->model();
    if (std::none_of(bundle->programs().begin(), bundle->programs().end(),
                     [](const auto& p) { return p.name == "final_norm"; }))
      throw ApiError{400, "this bundle has no final_norm stage; recompile it",
                     "invalid_request_error", "model", "unsupported_model"};
    if (e.dimensions && *e.dimensions != m.hidden)
      throw ApiError{400,
                     "'dimensions' must be the model's hidden size " + std::to_string(m.hidden) +
                         " (embeddings are not shortened), got " + std::to_string(*e.dimensions),
                     "invalid_request_error", "dimensions", "invalid_value"};
    std::vector<std::vector<std::int32_t>> prompts;
    std::int64_t tokens = 0;
    for (std::size_t i = 0; i < e.inputs.size(); ++i) {
      const auto& in = e.inputs[i];
      const std::string which = e.inputs.size() > 1 ? "input " + std::to_string(i) : "the input";
      std::vector<std::int32_t> ids = in.ids;
      if (in.text) {
        try {
          ids = text.tokenizer.encode(*in.text, true);
        } catch (const Error& x) {
          throw ApiError{400, which + ": " + x.what(), "invalid_request_error", "input", ""};
        }
      }
      for (auto id : ids)
        if (id >= m.vocab)
          throw ApiError{400,
                         which + ": token id " + std::to_string(id) +
                             " is outside the vocabulary [0, " + std::to_string(m.vocab) + ")",
                         "invalid_request_error", "input", "invalid_value"};
      const auto n = static_cast<std::int64_t>(ids.size());
      if (n == 0)
        throw ApiError{400, which + " has no tokens", "invalid_request_error", "input", ""};
      const std::int64_t most = m.params.with_history
                                    ? m.params.seq_length
                                    : std::min(m.params.seq_length, m.params.max_input_length);
      if (n > most)
        throw ApiError{400,
                       which + " has " + std::to_string(n) + " tokens; at most " +
                           std::to_string(most) + " fit this bundle" +
                           (m.params.with_history ? " (its compiled sequence length)"
                                                  : " (one prefill: compiled with --no-history)"),
                       "invalid_request_error", "input", "context_length_exceeded"};
      tokens += n;
      prompts.push_back(std::move(ids));
    }
    const ApiError busy{503,
                        "the server is busy: an embeddings request is computing and " +
                            std::to_string(max_queue) + " are already waiting; retry later",
                        "server_error", "", "queue_full"};
    struct InFlight {
      std::atomic<std::size_t>& n;
      ~InFlight() { --n; }
    } in_flight{embed_in_flight};
    if (++embed_in_flight > max_queue + 1)
      throw busy;
    std::vector<std::vector<float>> vectors;
    try {
      std::lock_guard lock(embed_m);
      if (!embed_session) {
        embed_exec = runtime::make_executor(*bundle, cores, 1);
        embed_stages = std::make_unique<runtime::CompiledStages>(*embed_exec, 0);
        embed_session =
            std::make_unique<runtime::Session>(*embed_stages, runtime::session_dims(m), m.params);
      }
      for (const auto& ids : prompts) {
        if (stopping)
          throw ApiError{503, "the server is shutting down", "server_error", "", "shutting_down"};
        vectors.push_back(runtime::embed(*embed_session, ids, {pooling, true}));
      }
    } catch (const Error& x) {
      throw ApiError(serve::api_error(x));
    }
    res.set_content(serve::embeddings_body(model_id, vectors, e.base64, tokens),
                    "application/json");
  }

  void generate(const httplib::Request& req, const httplib::ContentReader& reader,
                httplib::Response& res, bool chat) {
    authorize(req);
    const std::string body = read_body(req, reader, stopping);
    auto g = serve::parse_request(body, chat, model_id, text.tokenizer.config().generation_defaults,
                                  limits);
    std::optional<runtime::ToolCallFormat> tools;
    if (serve::parses_tool_calls(g)) {
      tools = tool_format();
      if (auto forced = serve::tool_call_grammar(*tools, g))
        g.grammar = std::move(forced);
    }
    serve::JobSpec spec;
    spec.prompt = prompt_of(g);
    const std::int64_t seq = bundle->model().params.seq_length;
    if (chat && overflow == runtime::ContextOverflow::truncate_middle)
      truncate_to_fit(g, spec.prompt, res);
    const auto n = static_cast<std::int64_t>(spec.prompt.size());
    if (n == 0)
      throw ApiError{400, "the prompt is empty", "invalid_request_error", "prompt", ""};
    if (n > seq)
      throw ApiError{400,
                     "the prompt has " + std::to_string(n) +
                         " tokens; this bundle's compiled sequence length is " +
                         std::to_string(seq) + " (prompt + answer), so at most " +
                         std::to_string(seq) + " prompt tokens fit (then the answer is one token)",
                     "invalid_request_error", chat ? "messages" : "prompt",
                     "context_length_exceeded"};
    const auto& params = bundle->model().params;
    if (!params.with_history && n > params.max_input_length)
      throw ApiError{400,
                     "the prompt has " + std::to_string(n) +
                         " tokens; this bundle was compiled without prefill_kv (--no-history), "
                         "so a prompt must fit one prefill of " +
                         std::to_string(params.max_input_length) + " tokens",
                     "invalid_request_error", chat ? "messages" : "prompt",
                     "context_length_exceeded"};
    // As the runtime's StopCriteria: tokens are sampled until the cache is full, and the last
    // one is never fed, so seq - n + 1 tokens fit after a prompt of n.
    const std::int64_t room = seq - n + 1;
    spec.max_tokens = static_cast<int>(std::min<std::int64_t>(g.max_tokens.value_or(room), room));
    spec.sampling = g.sampling;
    spec.stop = g.stop;
    spec.logprobs = g.logprobs;
    spec.grammar = g.grammar;
    auto job = scheduler->submit(std::move(spec));
    serve::AnswerIds ids{(chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++),
                         static_cast<std::int64_t>(std::time(nullptr)), model_id, chat};
    const bool logprobs = g.logprobs >= 0;
    const text::Tokenizer* tok = &text.tokenizer;
    if (!g.stream) {
      std::string answer;
      std::vector<runtime::TokenLogprobs> lps;
      while (!job->wait(answer, std::chrono::milliseconds(1000), &lps)) {
      }
      const auto& o = job->outcome();
      if (o.error)
        return send_error(res, *o.error);
      const nlohmann::ordered_json lp =
          logprobs ? serve::logprobs_json(chat, lps, *tok) : nlohmann::ordered_json();
      if (tools) {
        const auto parsed = runtime::parse_tool_calls(*tools, answer, call_id_prefix(ids));
        res.set_content(serve::completion_body(ids, parsed.content, o.finish_reason, o.usage,
                                               &parsed.tool_calls, lp),
                        "application/json");
        return;
      }
      res.set_content(serve::completion_body(ids, answer, o.finish_reason, o.usage, nullptr, lp),
                      "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    ++streams;
    struct State {
      bool first = true, finished = false;
      std::int64_t text_offset = 0; ///< completions logprobs: token text bytes sent so far
      std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
      std::optional<runtime::ToolCallParser> tools; ///< when the answer is parsed for calls
      bool called = false;                          ///< a tool call was sent
    };
    auto st = std::make_shared<State>();
    if (tools)
      st->tools.emplace(*tools, call_id_prefix(ids));
    const bool usage = g.include_usage;
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, ids, st, usage, logprobs, tok](std::size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& data) {
            const std::string frame = "data: " + data + "\n\n";
            st->last_write = std::chrono::steady_clock::now();
            return sink.write(frame.data(), frame.size());
          };
          if (st->first && ids.chat) {
            st->first = false;
            if (!send(serve::chunk_json(ids, "", true, "")))
              return false;
          }
          // Text as chunks, or (parsing tool calls) the parser's content and calls.
          auto send_events = [&](const std::vector<runtime::ToolCallEvent>& events) {
            for (const auto& e : events) {
              if (!e.is_call) {
                if (!send(serve::chunk_json(ids, e.content, false, "")))
                  return false;
                continue;
              }
              st->called = true;
              for (const auto& c : serve::tool_call_chunks(ids, e.index, e.call))
                if (!send(c))
                  return false;
            }
            return true;
          };
          std::string piece;
          std::vector<runtime::TokenLogprobs> lps;
          const bool done = job->wait(piece, std::chrono::milliseconds(200), &lps);
          nlohmann::ordered_json lp = nullptr;
          if (logprobs && !lps.empty()) {
            lp = serve::logprobs_json(ids.chat, lps, *tok, st->text_offset);
            if (!ids.chat)
              for (const auto& t : lp["tokens"])
                st->text_offset +=
                    static_cast<std::int64_t>(t.get_ref<const std::string&>().size());
          }
          bool sent = true;
          if (st->tools) {
            // The parser decides the content and calls; the tokens' logprobs go in a chunk of
            // their own.
            if (!piece.empty())
              sent = send_events(st->tools->feed(piece));
            if (sent && !lp.is_null())
              sent = send(serve::chunk_json(ids, "", false, "", nullptr, lp));
          } else if (!piece.empty() || !lp.is_null()) {
            sent = send(serve::chunk_json(ids, piece, false, "", nullptr, lp));
          }
          if (!sent)
            return false; // the client went away: the releaser cancels the job
          if (!done) {
            // A comment line now and then finds a client that went away while nothing is written.
            if (std::chrono::steady_clock::now() - st->last_write > std::chrono::seconds(2)) {
              const char ping[] = ": keep-alive\n\n";
              st->last_write = std::chrono::steady_clock::now();
              return sink.write(ping, sizeof ping - 1);
            }
            return true;
          }
          const auto& o = job->outcome();
          if (o.error) {
            if (!send(serve::error_body(*o.error)))
              return false;
          } else {
            if (st->tools && !send_events(st->tools->finish()))
              return false;
            if (!send(
                    serve::chunk_json(ids, "", false, st->called ? "tool_calls" : o.finish_reason)))
              return false;
            if (usage && !send(serve::chunk_json(ids, "", false, "", &o.usage)))
              return false;
          }
          if (!send("[DONE]"))
            return false;
          st->finished = true;
          sink.done();
          return true;
        },
        [this, job, st](bool) {
          if (!st->finished)
            job->cancel();
          --streams;
        });
  }
};

/// Runs `body`, answering ApiError and library errors in OpenAI's error shape.
template <class F>
void answer(httplib::Response& res, F&& body) {
  try {
    body();
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {
    send_error(res, serve::api_error(e));
  }
}

int default_slots(const bundle::Bundle& b, std::int64_t cores) {
  const double per_slot = static_cast<double>(serve::Scheduler::slot_bytes(b, cores));
  // The weights are mapped and resident while serving; half of the rest is for slots.
  const double room = (frontend::memory_limit_bytes() - static_cast<double>(b.file_bytes()) -
                       static_cast<double>(serve::Scheduler::shared_bytes(b, cores))) /
                      2;
  const double n = per_slot > 0 ? room / per_slot : 1;
  const int most = std::max(kDefaultMaxSlots, largest_decode_batch(b));
  return static_cast<int>(std::clamp(n, 1.0, static_cast<double>(most)));
}

} // namespace

int cmd_serve(const std::vector<std::string>& args) {
  std::string host = "127.0.0.1", api_key;
  int port = 8080, slots = 0;
  std::int64_t max_queue = 8, request_timeout = 10;
  std::string pooling = "last", overflow = "refuse";
  bool reuse_port = false;
  BundleArgs source;
  po::options_description o("tpullm serve BUNDLE [options]\n\n"
                            "BUNDLE: a bundle file, a checkpoint folder or a .gguf file.\n"
                            "An OpenAI-compatible HTTP server: POST /v1/chat/completions, POST "
                            "/v1/completions, POST /v1/embeddings, GET /v1/models, GET /health, "
                            "GET /metrics.\n\n"
                            "options");
  o.add_options()("help,h", "show this help")("host", po::value(&host)->default_value(host),
                                              "address to listen on")(
      "port", po::value(&port)->default_value(port),
      "TCP port (0: any free port; the log says which)")(
      "slots", po::value(&slots)->default_value(0),
      "conversations with their own KV cache (0: what memory allows, at most 4)")(
      "api-key", po::value(&api_key),
      "require 'Authorization: Bearer KEY' on /v1/ routes (default: the TPULLM_API_KEY "
      "environment variable when set)")("max-queue",
                                        po::value(&max_queue)->default_value(max_queue),
                                        "requests that may wait for a slot; more get 503")(
      "request-timeout", po::value(&request_timeout)->default_value(request_timeout),
      "seconds a whole request (headers and body) may take to arrive; then 408")(
      "reuse-port", po::bool_switch(&reuse_port),
      "share the port with other servers (SO_REUSEPORT); without it a port in use is refused")(
      "pooling", po::value(&pooling)->default_value(pooling),
      "how /v1/embeddings pools a prompt's final hidden states: last (the last token's) or mean")(
      "context-overflow", po::value(&overflow)->default_value(overflow),
      "refuse | truncate-middle: a chat that leaves too little room for its answer (max_tokens, "
      "else a quarter of the sequence length; at most half) gets 400, or loses its earliest "
      "turns after the system messages until it fits (X-Tpullm-Context-Truncated header)");
  DraftArgs draft;
  o.add(speculation_options(draft));
  ParallelArgs parallel;
  int micro_batches = 2, pipeline_steps = 1;
  auto po_parallel = parallel_options(parallel, false);
  po_parallel.add_options()(
      "micro-batches", po::value(&micro_batches)->default_value(micro_batches),
      "with --parallel pipeline: groups of generating slots whose decode steps are in flight "
      "together, so that the ranks run different groups' layers at once (1: one batch, the "
      "ranks in turn)")(
      "pipeline-steps", po::value(&pipeline_steps)->default_value(pipeline_steps),
      "with --parallel pipeline: decode steps each micro-batch takes per scheduler round, its "
      "next step begun as soon as its tokens are chosen, so the ranks do not wait at each "
      "round's ends; a round's tokens then reach the clients together, and a new request waits "
      "for the round");
  o.add(po_parallel);
  po::variables_map vm;
  if (!parse_bundle_command(args, o, source, vm))
    return kOk;
  const std::int64_t cores = source.threads;
  const bool micro_given = !vm["micro-batches"].defaulted();
  const bool steps_given = !vm["pipeline-steps"].defaulted();
  check(!parallel.mode.empty() || (parallel.memory_budget_mib == 0 && !micro_given && !steps_given),
        ErrorKind::invalid_input,
        micro_given   ? "--micro-batches"
        : steps_given ? "--pipeline-steps"
                      : "--memory-budget",
        "applies to serve only with --parallel pipeline (alone, --slots sets what it holds)");
  check(parallel.mode != "tensor" || (!micro_given && !steps_given), ErrorKind::invalid_input,
        micro_given ? "--micro-batches" : "--pipeline-steps",
        "applies to --parallel pipeline (under --parallel tensor every rank works on every "
        "call, so one call is in flight at a time)");
  check(micro_batches >= 1 && micro_batches <= 64, ErrorKind::invalid_input, "--micro-batches",
        "must be in [1, 64], got ", micro_batches);
  check(pipeline_steps >= 1 && pipeline_steps <= 64, ErrorKind::invalid_input, "--pipeline-steps",
        "must be in [1, 64], got ", pipeline_steps);
  check(port >= 0 && port <= 65535, ErrorKind::invalid_input, "--port",
        "must be in [0, 65535], got ", port);
  check(slots >= 0 && slots <= 256, ErrorKind::invalid_input, "--slots",
        "must be in [0, 256] (0: what memory allows), got ", slots);
  check(max_queue >= 0 && max_queue <= 4096, ErrorKind::invalid_input, "--max-queue",
        "must be in [0, 4096], got ", max_queue);
  const runtime::Pooling pool_mode = runtime::parse_pooling(pooling, "--pooling");
  const auto overflow_mode = runtime::parse_context_overflow(overflow, "--context-overflow");
  check(request_timeout >= 1 && request_timeout <= 3600, ErrorKind::invalid_input,
        "--request-timeout", "must be in [1, 3600] seconds, got ", request_timeout);
  // An empty key (an unset shell variable in --api-key "$KEY") would turn authentication off
  // without a word: refused.
  if (vm.count("api-key")) {
    check(!api_key.empty(), ErrorKind::invalid_input, "--api-key",
          "is empty (an unset variable?): give a key, or leave the option out to serve without "
          "one");
  } else if (const char* env = std::getenv("TPULLM_API_KEY"); env != nullptr) {
    api_key = env;
    check(!api_key.empty(), ErrorKind::invalid_input, "TPULLM_API_KEY",
          "is set but empty: give a key, or unset it to serve without one");
  }

  // SIGINT / SIGTERM are taken by one thread (sigtimedwait); every other thread blocks them, the
  // compiler's and the executor's included (so a checkpoint is compiled with them blocked: a
  // signal during that compile stops the server as soon as it listens). A client that goes away
  // must not kill the server with SIGPIPE.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  std::string checked; // the weights are checked before the first request is taken
  // --parallel pipeline: every rank opens the bundle and agrees on it and on the slots; ranks
  // 1..N-1 then run their layers for rank 0's slots until it stops.
  std::unique_ptr<CommandEngine> engine;
  if (!parallel.mode.empty()) {
    parallel.slots = slots;
    parallel.rank_reports = true; // each rank's calls and busy time, printed when serve stops
    parallel.default_slots = [cores](const bundle::Bundle& b) { return default_slots(b, cores); };
    engine = std::make_unique<CommandEngine>(parallel, source, args, true, &checked);
    if (engine->layer_rank())
      return engine->serve_layers();
    slots = static_cast<int>(engine->slots());
  }
  const OpenedBundle source_bundle =
      engine ? OpenedBundle{engine->engine().shared_bundle(), source.source, source.source, false}
             : open_bundle_source(source, true, &checked);
  const std::string& file = source_bundle.name;
  auto opened = source_bundle.bundle;
  check(engine || opened->model().tensor_parallel == 1, ErrorKind::invalid_input, file,
        "is split for tensor parallel over ", opened->model().tensor_parallel,
        " ranks: serve it with mpirun -np ", opened->model().tensor_parallel,
        " tpullm serve ... --parallel tensor");
  check(!opened->model().text.tokenizer_json.empty(), ErrorKind::unsupported, file,
        "this bundle has no tokenizer (its checkpoint had no tokenizer.json); serve reads "
        "prompts and writes answers as text: compile from a checkpoint with tokenizer.json");
  // The port before the tokenizer and the executor: one in use is refused before they are
  // loaded (connections that arrive meanwhile wait in the listen backlog).
  serve::HttpLimits limits;
  limits.request_time = std::chrono::seconds(request_timeout);
  limits.read_bytes = 4 * kMaxBodyBytes; // the body and its framing (chunk-size lines)
  serve::HttpServer http(limits);
  const int bound = http.open(host, port, reuse_port);
  check(bound > 0, ErrorKind::invalid_input, "--host / --port", "cannot listen on ", host, ":",
        port,
        port != 0 ? " (in use by another program? --reuse-port shares a port on purpose)" : "");
  // Every request speculates when --draft says so (the same answers; slot_pool.hpp). The draft
  // engine outlives the server, whose scheduler calls it.
  runtime::GenerateOptions drafting;
  const auto drafts = apply_draft(draft, *opened, source.open, cores, drafting);
  auto text = runtime::load_text_side(*opened, file);
  Server s(std::move(opened), std::move(text));
  // The model's name: the bundle's or the GGUF's stem, or the checkpoint folder's name.
  std::filesystem::path id_path = std::filesystem::path(file).lexically_normal();
  if (id_path.filename().empty())
    id_path = id_path.parent_path();
  s.model_id = id_path.stem().string();
  s.api_key = api_key;
  s.pooling = pool_mode;
  s.overflow = overflow_mode;
  s.max_queue = static_cast<std::size_t>(max_queue);
  s.cores = cores;
  s.pipeline = engine != nullptr;
  if (slots == 0)
    slots = default_slots(*s.bundle, cores);
  serve::SchedulerOptions scheduling{slots, cores, static_cast<std::size_t>(max_queue),
                                     drafting.speculation};
  if (engine) { // the engine's executor (its KV slots agreed by the ranks) and the pipeline
    scheduling.executor = &engine->engine().executor();
    scheduling.remote = engine->pipeline();
    scheduling.micro_batches = engine->tensor_parallel() ? 1 : micro_batches;
    scheduling.pipeline_steps = engine->tensor_parallel() ? 1 : pipeline_steps;
    scheduling.pipeline_stats = engine->pipeline_stats();
  }
  s.scheduler = std::make_unique<serve::Scheduler>(s.bundle, s.text, scheduling, s.metrics);
  share_draft_workers(drafts, s.scheduler->executor());

  // Workers for every slot, every queued request and a few more (a request beyond them waits
  // for a worker, then usually gets 503 from the queue); probes have their own (serve_http.hpp).
  http.start(static_cast<std::size_t>(slots + max_queue + 4),
             [&s](int status, const std::string& why) {
               s.metrics.count_request("other", status);
               std::cerr << "tpullm serve: connection answered " << status << " (" << why << ")\n";
             });
  http.set_payload_max_length(kMaxBodyBytes);
  http.set_tcp_nodelay(true); // each SSE event leaves at once (no Nagle delay)
  http.set_logger([&s](const httplib::Request& req, const httplib::Response& res) {
    // Routes by name (an unknown path is "other": clients cannot grow the label set).
    const bool known = req.path == "/v1/chat/completions" || req.path == "/v1/completions" ||
                       req.path == "/v1/embeddings" || req.path == "/v1/models" ||
                       req.path == "/health" || req.path == "/metrics";
    s.metrics.count_request(known ? req.path : "other", res.status);
    // What the client sent is escaped: a decoded newline or escape sequence in the path must
    // not forge a log line or drive the terminal.
    std::cerr << "tpullm serve: " << serve::log_escape(req.method, 16) << " "
              << serve::log_escape(req.path) << " " << res.status << "\n";
  });
  // A request whose body is refused here is answered without reading it (and its connection
  // closed): only the two generation routes and /v1/embeddings read bodies, each through
  // read_body's bound.
  http.set_expect_100_continue_handler([](const httplib::Request& req, httplib::Response& res) {
    const std::string v = req.get_header_value("Content-Length");
    if (v.empty()) // chunked: bounded while it is read
      return 100;
    if (v.size() <= 18 && v.find_first_not_of("0123456789") == std::string::npos &&
        std::stoull(v) <= kMaxBodyBytes)
      return 100;
    serve::ConnectionControl::close_after_answer();
    res.status = 413;
    return 413;
  });
  http.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    const bool generation =
        req.method == "POST" && (req.path == "/v1/chat/completions" ||
                                 req.path == "/v1/completions" || req.path == "/v1/embeddings");
    const std::string length = req.get_header_value("Content-Length");
    const bool body = req.has_header("Transfer-Encoding") || (!length.empty() && length != "0") ||
                      req.method == "POST" || req.method == "PUT" || req.method == "PATCH" ||
                      req.method == "DELETE" || req.method == "PRI";
    if (generation || !body)
      return httplib::Server::HandlerResponse::Unhandled;
    serve::ConnectionControl::close_after_answer();
    const bool known = req.path == "/v1/models" || req.path.starts_with("/v1/models/") ||
                       req.path == "/health" || req.path == "/metrics";
    send_error(res, known ? ApiError{405, req.method + " " + req.path + " is not served",
                                     "invalid_request_error", "", "method_not_allowed"}
                          : ApiError{404, "no route " + req.method + " " + req.path,
                                     "invalid_request_error", "", "unknown_route"});
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_provider_)
          return httplib::Server::HandlerResponse::Unhandled;
        ApiError e{res.status, "", "invalid_request_error", "", ""};
        if (res.status == 404) {
          e.message = "no route " + req.method + " " + req.path;
          e.code = "unknown_route";
        } else if (res.status == 413) {
          e.message = "the request body is larger than " + std::to_string(kMaxBodyBytes) + " bytes";
          e.code = "body_too_large";
        } else if (res.status == 400 || res.status == 414) {
          e.message = "malformed HTTP request (request line or headers)";
          e.code = "bad_request";
        } else {
          e.message = "the request was refused (HTTP " + std::to_string(res.status) + ")";
        }
        res.set_content(serve::error_body(e), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        send_error(res, ApiError{500, "internal error: " + what, "server_error", "", ""});
      });

  http.Post("/v1/chat/completions", [&s](const httplib::Request& req, httplib::Response& res,
                                         const httplib::ContentReader& reader) {
    answer(res, [&] { s.generate(req, reader, res, true); });
  });
  http.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res,
                                    const httplib::ContentReader& reader) {
    answer(res, [&] { s.generate(req, reader, res, false); });
  });
  http.Post("/v1/embeddings", [&s](const httplib::Request& req, httplib::Response& res,
                                   const httplib::ContentReader& reader) {
    answer(res, [&] { s.embeddings(req, reader, res); });
  });
  http.Get("/v1/models", [&s](const httplib::Request& req, httplib::Response& res) {
    answer(res, [&] {
      s.authorize(req);
      const nlohmann::ordered_json m = {
          {"id", s.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "tpullm"}};
      res.set_content(nlohmann::ordered_json{{"object", "list"}, {"data", {m}}}.dump(),
                      "application/json");
    });
  });
  http.Get(R"(/v1/models/(.+))", [&s](const httplib::Request& req, httplib::Response& res) {
    answer(res, [&] {
      s.authorize(req);
      if (req.matches[1] != s.model_id)
        throw ApiError{404, "the model '" + std::string(req.matches[1]) + "' does not exist",
                       "invalid_request_error", "model", "model_not_found"};
      res.set_content(
          nlohmann::ordered_json{
              {"id", s.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "tpullm"}}
              .dump(),
          "application/json");
    });
  });
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(s.metrics.text(), "text/plain; version=0.0.4");
  });

  const auto& m = s.bundle->model();
  std::cerr << "tpullm serve: " << file << " (" << m.family << " '" << m.source << "', seq_length "
            << m.params.seq_length << ") as model '" << s.model_id << "' with " << slots
            << " slot(s) of " << serve::Scheduler::slot_bytes(*s.bundle, cores) / (1 << 20)
            << " MiB, batched decode up to " << s.scheduler->max_decode_batch() << " rows; "
            << (draft.source == "none" ? std::string()
                                       : "speculation from " + draft.source + " (up to " +
                                             std::to_string(draft.max) + " draft tokens); ")
            << (engine && !engine->tensor_parallel()
                    ? std::to_string(micro_batches) + " micro-batches of " +
                          std::to_string(pipeline_steps) + " step(s) a round; "
                    : std::string())
            << checked << "; listening on http://" << host << ":" << bound << std::endl;

  // The first signal stops the server (stopper); the waiter goes on watching: a second signal,
  // or kStopBound after the first, ends the process at once.
  std::atomic<bool> done{false};
  std::thread stopper;
  auto stop = [&] {
    http.begin_stop();   // no new request is read; a connection waiting for headers gets 503
    s.scheduler->stop(); // queued and running requests end with 503 "shutting down"
    // Let the streaming answers write their last event before the sockets close.
    for (int i = 0; i < 50 && s.streams > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // A signal right after start-up: httplib's stop() does nothing until its loop runs.
    for (int i = 0; i < 100 && !http.is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    http.stop();
  };
  std::thread waiter([&] {
    std::optional<std::chrono::steady_clock::time_point> first;
    while (!done) {
      const timespec tick{0, 100'000'000};
      const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
      if (done)
        return;
      if (sig > 0 && first) {
        std::cerr << "tpullm serve: second signal " << sig << ", exiting now" << std::endl;
        std::_Exit(128 + sig);
      }
      if (sig > 0) {
        first = std::chrono::steady_clock::now();
        s.stopping = true;
        std::cerr << "tpullm serve: signal " << sig << ", stopping (a second signal exits at once)"
                  << std::endl;
        stopper = std::thread(stop);
      } else if (first && std::chrono::steady_clock::now() - *first > kStopBound) {
        std::cerr << "tpullm serve: still busy " << kStopBound.count() / 1000
                  << " s after the signal (a chat template render or a model step); exiting "
                     "without waiting for it"
                  << std::endl;
        std::_Exit(1);
      }
    }
  });
  const bool listened = http.listen_after_bind();
  if (!listened)
    std::cerr << "tpullm serve: the listening socket failed; stopping" << std::endl;
  s.stopping = true;
  http.begin_stop();
  s.scheduler->stop();
  http.finish(kStopGrace);
  done = true;
  waiter.join();
  if (stopper.joinable())
    stopper.join();
  if (engine) { // what the ranks did: their busy time against their time is the pipeline's fill
    std::cerr << "tpullm serve: " << engine->describe() << "\n";
    for (const auto& r : engine->rank_reports())
      std::cerr << "tpullm serve: rank report " << r << "\n";
  }
  std::cerr << "tpullm serve: stopped" << std::endl;
  if (engine && !engine->peak_within_budget(std::cerr))
    return kCheckFailed;
  return listened ? kOk : 1;
}

} // namespace tpullm::cli
